// Response formatting (OpenAI's JSON and SSE shapes), the Prometheus exposition and the API-key
// comparison. Expected values are written out by hand from OpenAI's and Prometheus' formats.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/openai_response.h"

using namespace mpkv;
using namespace mpkv::server;
using json = nlohmann::json;

namespace {
// The JSON objects of an SSE text: every "data: {...}" event parsed; "[DONE]" as the string.
std::vector<json> sse_events(const std::string& text) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos) << "event not terminated by a blank line";
    if (end == std::string::npos) break;
    const std::string ev = text.substr(pos, end - pos);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    const std::string data = ev.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return out;
}
}  // namespace

TEST(ServerFormat, FinishReasons) {
  EXPECT_STREQ(openai_finish_reason(FinishReason::stop), "stop");
  EXPECT_STREQ(openai_finish_reason(FinishReason::length), "length");
  EXPECT_STREQ(openai_finish_reason(FinishReason::context), "length");
  EXPECT_EQ(openai_finish_reason(FinishReason::none), nullptr);
}

TEST(ServerFormat, ChatFullBody) {
  ResponseFormatter f(Endpoint::chat, "chatcmpl-1", 1700000000, "smol", false, false);
  const json j = json::parse(f.full({{"Hello", {}, FinishReason::length}}, {12, 3}));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "smol");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "Hello"}}));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 12},
                              {"completion_tokens", 3},
                              {"total_tokens", 15},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
}

// Several completion prompts: one choice each, index = position, logprobs offsets per choice.
TEST(ServerFormat, SeveralChoicesKeepTheirIndexAndOffsets) {
  ResponseFormatter f(Endpoint::completions, "cmpl-3", 1, "m", true, false, 2);
  const std::vector<LogprobEntry> a{{"ab", -0.1f, {}}, {"c", -0.2f, {}}}, b{{"xyz", -1.0f, {}}};
  const json j = json::parse(f.full({{"abc", a, FinishReason::stop}, {"xyz", b, FinishReason::length}}, {7, 3}));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "xyz");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], json({0, 2}));
  EXPECT_EQ(j["choices"][1]["logprobs"]["text_offset"], json::array({0}));
  EXPECT_EQ(j["usage"]["total_tokens"], 10);
  // Streaming: each choice's offsets advance separately.
  std::string s = f.delta(1, "xy", {{"xy", -1.0f, {}}});  // one statement each: delta() advances the offsets
  s += f.delta(0, "a", {{"a", -1.0f, {}}});
  s += f.delta(1, "z", {{"z", -1.0f, {}}});
  const std::vector<json> ev = sse_events(s);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0]["choices"][0]["index"], 1);
  EXPECT_EQ(ev[1]["choices"][0]["logprobs"]["text_offset"], json::array({0}));
  EXPECT_EQ(ev[2]["choices"][0]["logprobs"]["text_offset"], json({2}));
}

TEST(ServerFormat, ChatLogprobsShape) {
  ResponseFormatter f(Endpoint::chat, "c", 1, "m", true, false);
  const std::vector<LogprobEntry> lps = {{"Hi", -0.25f, {{"Hi", -0.25f}, {"Yo", -2.0f}}}};
  const json lp = json::parse(f.full({{"Hi", lps, FinishReason::stop}}, {1, 1}))["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 1u);
  const json& t = lp["content"][0];
  EXPECT_EQ(t["token"], "Hi");
  EXPECT_EQ(t["logprob"], -0.25);
  EXPECT_EQ(t["bytes"], json({72, 105}));
  ASSERT_EQ(t["top_logprobs"].size(), 2u);
  EXPECT_EQ(t["top_logprobs"][1], json({{"token", "Yo"}, {"logprob", -2.0}, {"bytes", {89, 111}}}));
}

TEST(ServerFormat, CompletionLogprobsShapeAndOffsets) {
  ResponseFormatter f(Endpoint::completions, "cmpl-1", 1, "m", true, false);
  const std::vector<LogprobEntry> lps = {{"ab", -1.0f, {{"ab", -1.0f}}}, {"c", -0.5f, {{"c", -0.5f}, {"d", -3.0f}}}};
  const json j = json::parse(f.full({{"abc", lps, FinishReason::stop}}, {2, 2}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"ab", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({-1.0, -0.5}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"c", -0.5}, {"d", -3.0}}));
  EXPECT_EQ(lp["text_offset"], json({0, 2}));
}

TEST(ServerFormat, InvalidUtf8BecomesReplacementCharacter) {
  ResponseFormatter f(Endpoint::completions, "c", 1, "m", false, false);
  const json j = json::parse(f.full({{std::string("a\xE2\x82"), {}, FinishReason::stop}}, {1, 1}));
  EXPECT_EQ(j["choices"][0]["text"], "a\xEF\xBF\xBD");
}

TEST(ServerFormat, ChatStreamEvents) {
  ResponseFormatter f(Endpoint::chat, "chatcmpl-9", 5, "m", false, true);
  const std::string text = f.first() + f.delta(0, "Hel", {}) + f.delta(0, "lo", {}) + f.last(0, FinishReason::stop) +
                           f.usage({4, 2}) + ResponseFormatter::done();
  const std::vector<json> ev = sse_events(text);
  ASSERT_EQ(ev.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(ev[i]["id"], "chatcmpl-9");
  }
  EXPECT_EQ(ev[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(ev[0]["usage"].is_null());
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(ev[1]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(ev[3]["choices"][0]["delta"], json::object());
  EXPECT_EQ(ev[3]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(ev[4]["choices"], json::array());
  EXPECT_EQ(ev[4]["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6},
                                  {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(ev[5], "[DONE]");
}

TEST(ServerFormat, CompletionStreamWithoutUsage) {
  ResponseFormatter f(Endpoint::completions, "cmpl-2", 5, "m", false, false);
  EXPECT_EQ(f.first(), "");
  const std::vector<json> ev = sse_events(f.delta(0, "x", {}) + f.last(0, FinishReason::length) + ResponseFormatter::done());
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0]["object"], "text_completion");
  EXPECT_EQ(ev[0]["choices"][0]["text"], "x");
  EXPECT_FALSE(ev[0].contains("usage"));
  EXPECT_EQ(ev[1]["choices"][0]["finish_reason"], "length");
}

TEST(ServerFormat, ErrorObject) {
  const json j = json::parse(error_body(ApiError(400, "'top_p' must be in (0, 1]", "top_p")));
  EXPECT_EQ(j, json({{"error", {{"message", "'top_p' must be in (0, 1]"}, {"type", "invalid_request_error"},
                                {"param", "top_p"}, {"code", nullptr}}}}));
  const std::vector<json> ev = sse_events(ResponseFormatter::error_event(ApiError(503, "x", "", "c", "server_error")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["error"]["code"], "c");
}

TEST(ServerMetrics, HistogramIsCumulative) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // le="0.1" includes 0.1
  h.observe(0.5);
  h.observe(7.0);
  const Histogram::Snapshot s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_DOUBLE_EQ(s.sum, 7.65);
}

TEST(ServerMetrics, ExpositionHoldsEngineFiguresWithModelLabel) {
  ServerMetrics m("smol\"2");
  EngineMetrics e;
  e.running = 3;
  e.waiting = 2;
  e.kv_bytes_used = 250;
  e.kv_budget_bytes = 1000;
  e.kv_effective_bits = 4.5;
  e.preemptions_total = 1;
  e.prompt_tokens_total = 40;
  e.generation_tokens_total = 9;
  e.page_shrinks[{16, 8}] = 12;
  const std::string t = m.render(e);
  const std::string L = "{model_name=\"smol\\\"2\"}";
  for (const std::string& line :
       {"vllm:num_requests_running" + L + " 3", "vllm:num_requests_waiting" + L + " 2",
        "vllm:kv_cache_usage_perc" + L + " 0.25", "vllm:num_preemptions_total" + L + " 1",
        "vllm:prompt_tokens_total" + L + " 40", "vllm:generation_tokens_total" + L + " 9",
        "mpkv:kv_bytes_used" + L + " 250", "mpkv:kv_budget_bytes" + L + " 1000", "mpkv:kv_effective_bits" + L + " 4.5",
        std::string("mpkv:kv_page_shrinks_total{from=\"16\",to=\"8\",model_name=\"smol\\\"2\"} 12"),
        std::string("# TYPE vllm:time_to_first_token_seconds histogram"),
        std::string("# TYPE vllm:inter_token_latency_seconds histogram"),
        std::string("# TYPE vllm:e2e_request_latency_seconds histogram"),
        std::string("# TYPE vllm:request_queue_time_seconds histogram"),
        std::string("vllm:time_to_first_token_seconds_bucket{model_name=\"smol\\\"2\",le=\"+Inf\"} 0")})
    EXPECT_NE(t.find(line + "\n"), std::string::npos) << line << "\n---\n" << t;
  EXPECT_NE(m.render(EngineMetrics{}).find("vllm:kv_cache_usage_perc{model_name=\"smol\\\"2\"} 0\n"), std::string::npos);
}

TEST(ServerMetrics, OutputEventsFeedHistograms) {
  ServerMetrics m("m");
  RequestTiming t;
  const auto t0 = std::chrono::steady_clock::time_point{} + std::chrono::seconds(100);
  RequestOutput o;
  o.tokens = {1};
  m.on_output(t, o, t0);                                   // first token: no inter-token gap
  o.tokens = {2, 3};
  m.on_output(t, o, t0 + std::chrono::milliseconds(200));  // two tokens, 0.1 s each
  o.tokens.clear();
  o.finished = true;
  o.reason = FinishReason::stop;
  o.stats.n_generated = 3;
  o.stats.first_token_seconds = 0.03;
  o.stats.total_seconds = 0.4;
  o.stats.queue_seconds = 0.002;
  o.stats.n_prompt_tokens = 7;
  m.on_output(t, o, t0 + std::chrono::milliseconds(210));
  RequestTiming aborted_timing;  // an aborted request: counted by reason, in no histogram
  RequestOutput aborted;
  aborted.finished = true;
  aborted.reason = FinishReason::abort;
  aborted.stats = o.stats;
  m.on_output(aborted_timing, aborted, t0);
  const std::string s = m.render(EngineMetrics{});
  EXPECT_NE(s.find("vllm:inter_token_latency_seconds_count{model_name=\"m\"} 2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("vllm:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.08\"} 0\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:inter_token_latency_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 0.03\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:e2e_request_latency_seconds_count{model_name=\"m\"} 1\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:request_queue_time_seconds_sum{model_name=\"m\"} 0.002\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 1\n"), std::string::npos);
  EXPECT_NE(s.find("vllm:request_success_total{finished_reason=\"abort\",model_name=\"m\"} 1\n"), std::string::npos);
  // Per-request phases (vLLM's names): prefill = first token - queue, decode = total - first token,
  // inference = total - queue; token counts per request in 1-2-5 buckets.
  for (const char* line : {"vllm:request_prefill_time_seconds_sum{model_name=\"m\"} 0.028",
                           "vllm:request_decode_time_seconds_sum{model_name=\"m\"} 0.37",
                           "vllm:request_inference_time_seconds_sum{model_name=\"m\"} 0.398",
                           "vllm:request_decode_time_seconds_count{model_name=\"m\"} 1",
                           "vllm:request_prompt_tokens_sum{model_name=\"m\"} 7",
                           "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=\"5\"} 0",
                           "vllm:request_prompt_tokens_bucket{model_name=\"m\",le=\"10\"} 1",
                           "vllm:request_generation_tokens_sum{model_name=\"m\"} 3",
                           "vllm:request_generation_tokens_count{model_name=\"m\"} 1",
                           "vllm:request_generation_tokens_bucket{model_name=\"m\",le=\"100000\"} 1"})
    EXPECT_NE(s.find(std::string(line) + "\n"), std::string::npos) << line << "\n---\n" << s;
}

TEST(ServerMetrics, UnknownFieldsAreCountedWithBoundedLabels) {
  ServerMetrics m("m");
  EXPECT_TRUE(m.count_unknown_field("user"));   // first time: the caller logs it
  EXPECT_FALSE(m.count_unknown_field("user"));  // already known: no second log line
  for (size_t i = 1; i < ServerMetrics::kMaxUnknownFieldLabels; ++i) EXPECT_TRUE(m.count_unknown_field("f" + std::to_string(i)));
  EXPECT_TRUE(m.count_unknown_field("late"));   // past the label limit: counted under "other", logged once
  EXPECT_FALSE(m.count_unknown_field("late"));
  const std::string s = m.render(EngineMetrics{});
  EXPECT_NE(s.find("mpkv:request_unknown_fields_total{field=\"user\",model_name=\"m\"} 2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("mpkv:request_unknown_fields_total{field=\"f63\",model_name=\"m\"} 1\n"), std::string::npos);
  EXPECT_EQ(s.find("field=\"late\""), std::string::npos);
  EXPECT_NE(s.find("mpkv:request_unknown_fields_total{field=\"other\",model_name=\"m\"} 2\n"), std::string::npos);
}

TEST(ServerAuth, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secret", "secreT"));
  EXPECT_FALSE(constant_time_equals("secret", "secret2"));
  EXPECT_FALSE(constant_time_equals("secret", "secre"));
  EXPECT_FALSE(constant_time_equals("", "x"));
  EXPECT_FALSE(constant_time_equals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ServerAuth, BearerHeader) {
  EXPECT_TRUE(bearer_authorized("", ""));  // no key configured
  EXPECT_TRUE(bearer_authorized("Bearer k1", "k1"));
  EXPECT_TRUE(bearer_authorized("bearer k1", "k1"));
  EXPECT_FALSE(bearer_authorized("", "k1"));
  EXPECT_FALSE(bearer_authorized("k1", "k1"));
  EXPECT_FALSE(bearer_authorized("Basic k1", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer k2", "k1"));
  EXPECT_FALSE(bearer_authorized("Bearer ", "k1"));
}
