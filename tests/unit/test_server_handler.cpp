// The API handler with a model-free EchoBackend (echo_backend.h): routing, auth, limits, errors,
// streaming, cancellation and draining; then the same through real sockets on 127.0.0.1 (an
// ephemeral port), including a client that disconnects mid-stream.
#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <atomic>
#include <functional>
#include <map>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/api_handler.h"
#include "server/http_server.h"
#include "server/shutdown.h"
#include "support/echo_backend.h"
#include "test_server_support.h"

using namespace mpkv;
using namespace mpkv::server;
using json = nlohmann::json;
using namespace std::chrono_literals;
using mpkv::server::test::Stepper;

namespace {
HttpRequest post(const std::string& path, const std::string& body, const std::string& auth = "") {
  return {"POST", path, auth, body, nullptr};
}
HttpRequest get(const std::string& path, const std::string& auth = "") { return {"GET", path, auth, "", nullptr}; }

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

// Reads a stream to its end, stepping the backend between pieces (bounded).
std::string drain_stream(ResponseStream& s, EchoBackend* b) {
  std::string all, piece;
  for (int i = 0; i < 10000; ++i) {
    const bool more = s.next(piece, 0ms);
    all += piece;
    if (!more) return all;
    if (b) b->step();
  }
  ADD_FAILURE() << "stream did not end";
  return all;
}

// Parses an SSE body into its events ("[DONE]" as a string).
std::vector<json> sse_json(const std::string& sse) {
  std::vector<json> ev;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string data = sse.substr(pos + 6, end - pos - 6);
    ev.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
    pos = end + 2;
  }
  return ev;
}

const std::string kChat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})";

// What a stream said per choice index: its text (completions' "text", chat's delta content), and
// how many role chunks and finish chunks it got.
struct StreamedChoice {
  std::string text;
  int roles = 0, finishes = 0;
};
std::map<int, StreamedChoice> per_choice(const std::vector<json>& events) {
  std::map<int, StreamedChoice> out;
  for (const json& e : events) {
    if (!e.is_object() || e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    StreamedChoice& sc = out[c["index"].get<int>()];
    if (c.contains("text")) sc.text += c["text"].get<std::string>();
    if (c.contains("delta")) {
      sc.roles += c["delta"].contains("role");
      if (c["delta"].contains("content")) sc.text += c["delta"]["content"].get<std::string>();
    }
    sc.finishes += !c["finish_reason"].is_null();
  }
  return out;
}

// An EchoBackend that records the parameters of every request it is given.
class Recording : public EchoBackend {
 public:
  using EchoBackend::EchoBackend;
  uint64_t add_request(RequestParams params, OutputCallback on_output) override {
    seen.push_back(params);
    return EchoBackend::add_request(std::move(params), std::move(on_output));
  }
  std::vector<RequestParams> seen;
};
}  // namespace

TEST(ServerHandler, HealthFollowsLoadingAndDraining) {
  ApiHandler h({});
  EXPECT_EQ(h.handle(get("/health")).status, 503);
  EXPECT_EQ(h.handle(post("/v1/chat/completions", kChat)).status, 503);
  // The model list too: a client that polls /v1/models for readiness must not start while the
  // model loads (llama-server answers 503 there as well).
  const HttpResponse loading = h.handle(get("/v1/models"));
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(json::parse(loading.body)["error"]["message"], "the model is loading");
  EchoBackend b(64, 4, true);
  h.set_backend(&b);
  EXPECT_EQ(h.handle(get("/health")).status, 200);
  EXPECT_EQ(h.handle(get("/v1/models")).status, 200);
  h.begin_drain();
  const HttpResponse r = h.handle(get("/health"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  EXPECT_EQ(h.handle(post("/v1/chat/completions", kChat)).status, 503);
  EXPECT_EQ(h.handle(get("/v1/models")).status, 503);
}

TEST(ServerHandler, ApiKeyGuardsEverythingButHealth) {
  HandlerOptions o;
  o.api_key = "sk-test";
  ApiHandler h(o);
  EchoBackend b(64, 4, true);
  h.set_backend(&b);
  EXPECT_EQ(h.handle(get("/health")).status, 200);
  for (const HttpRequest& req : {get("/v1/models"), get("/metrics"), post("/v1/chat/completions", kChat),
                                 post("/v1/completions", "{}"), get("/nope")}) {
    for (const char* auth : {"", "Bearer wrong", "sk-test", "Bearer sk-tes"}) {
      HttpRequest r = req;
      r.authorization = auth;
      const HttpResponse resp = h.handle(r);
      EXPECT_EQ(resp.status, 401) << r.path << " " << auth;
      EXPECT_EQ(json::parse(resp.body)["error"]["type"], "authentication_error");
      EXPECT_EQ(header(resp, "WWW-Authenticate"), "Bearer");
    }
  }
  EXPECT_EQ(h.handle(get("/v1/models", "Bearer sk-test")).status, 200);
  EXPECT_EQ(h.handle(post("/v1/chat/completions", kChat, "Bearer sk-test")).status, 200);
}

TEST(ServerHandler, RoutesMethodsAndBodyLimit) {
  HandlerOptions o;
  o.max_body_bytes = 100;
  o.model_name = "smol";
  ApiHandler h(o);
  EchoBackend b(64, 4, true);
  h.set_backend(&b);
  EXPECT_EQ(h.handle(get("/v2/other")).status, 404);
  EXPECT_EQ(h.handle(get("/v1/chat/completions")).status, 405);
  EXPECT_EQ(h.handle(post("/v1/models", "")).status, 405);
  const HttpResponse big = h.handle(post("/v1/completions", std::string(101, ' ')));
  EXPECT_EQ(big.status, 413);
  EXPECT_TRUE(json::parse(big.body).contains("error"));
  const json models = json::parse(h.handle(get("/v1/models")).body);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "smol");
  const HttpResponse m = h.handle(get("/metrics"));
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.content_type.rfind("text/plain", 0), 0u);
  EXPECT_NE(m.body.find("vllm:num_requests_running{model_name=\"smol\"} 0\n"), std::string::npos);
}

TEST(ServerHandler, BadRequestsGet400WithErrorObject) {
  ApiHandler h({});
  EchoBackend b(32, 4, true);
  h.set_backend(&b);
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", ""},
      {R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "x"})", "temperature"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1})", "max_tokens"},
      {R"({"messages": [{"role": "robot", "content": "hi"}]})", "messages[0].role"},
      // The echo chat template makes this prompt longer than the 32-token context.
      {R"({"messages": [{"role": "user", "content": "0123456789012345678901234567890123456789"}]})", "messages"},
      // Fits alone, but not with 30 tokens to generate.
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30})", "max_tokens"},
  };
  for (const auto& [body, param] : cases) {
    const HttpResponse r = h.handle(post("/v1/chat/completions", body));
    EXPECT_EQ(r.status, 400) << body;
    const json e = json::parse(r.body)["error"];
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(param.empty() ? json(nullptr) : json(param), e["param"]) << body;
  }
  EXPECT_EQ(json::parse(h.handle(post("/v1/completions", R"({"prompt": ""})")).body)["error"]["param"], "prompt");
  EXPECT_EQ(b.metrics().running, 0);  // nothing reached the backend
}

TEST(ServerHandler, NonStreamingChatAndCompletion) {
  ApiHandler h({});
  EchoBackend b(256, 4, true);
  h.set_backend(&b);
  HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": "abcdef", "max_tokens": 4, "logprobs": 1})"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["text"], "abcd");  // the echo backend repeats the prompt
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json({"a", "b", "c", "d"}));
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 6},
                              {"completion_tokens", 4},
                              {"total_tokens", 10},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);

  r = h.handle(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stop": ":"})"));
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "user");  // "user: x..." cut at the stop string ":"
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(b.metrics().kv_bytes_used, 0u);
}

TEST(ServerHandler, StreamingChatEndsWithUsageAndDone) {
  ApiHandler h({});
  EchoBackend b(256, 4);
  h.set_backend(&b);
  const HttpResponse r = h.handle(post("/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream");
  const std::string sse = drain_stream(*r.stream, &b);
  std::string content;
  const std::vector<json> ev = sse_json(sse);
  EXPECT_EQ(sse.size(), sse.rfind("data: [DONE]\n\n") + 14);  // every event parsed, [DONE] last
  ASSERT_GE(ev.size(), 4u);
  for (size_t i = 0; i + 2 < ev.size(); ++i) content += ev[i]["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(content, "use");
  EXPECT_EQ(ev[ev.size() - 3]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(ev.back(), "[DONE]");
}

// /v1/completions with several prompts (text and token ids): one choice each, in order; echo
// puts each prompt's text first; usage sums the choices.
TEST(ServerHandler, SeveralPromptsTokenIdsAndEcho) {
  ApiHandler h({});
  EchoBackend b(256, 4, true);
  h.set_backend(&b);
  EchoBackend stepped(256, 4);  // declared before the responses: their streams reference it
  HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": ["abc", [120, 121]], "max_tokens": 2, "echo": true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "abcab");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "xyxy");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  r = h.handle(post("/v1/completions", R"({"prompt": [100, 101, 102], "max_tokens": 3})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], "def");
  // Streaming: each choice's text under its index, one finish chunk each, then usage and [DONE].
  h.set_backend(&stepped);
  r = h.handle(post("/v1/completions", R"({"prompt": ["ab", "xyz"], "max_tokens": 3, "echo": true, "stream": true,
                                          "stream_options": {"include_usage": true}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<json> ev = sse_json(drain_stream(*r.stream, &stepped));
  std::map<int, StreamedChoice> got = per_choice(ev);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text, "ababa");
  EXPECT_EQ(got[1].text, "xyzxyz");
  EXPECT_EQ(got[0].finishes + got[1].finishes, 2);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(stepped.metrics().kv_bytes_used, 0u);
}

// n > 1: n choices per prompt (index = prompt * n + j), each its own engine request with the
// same prompt and parameters and seed + j; usage counts each prompt once and sums the
// completions; streamed chat sends the role chunk of every choice.
TEST(ServerHandler, SeveralChoicesPerPrompt) {
  ApiHandler h({});
  Recording b(256, 16, true);
  h.set_backend(&b);
  Recording stepped(256, 16);  // declared before the responses: their streams reference it
  HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": ["abc", "xy"], "n": 3, "max_tokens": 2, "seed": 40, "echo": true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], i < 3 ? "abcab" : "xyxy") << i;
  }
  ASSERT_EQ(b.seen.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(b.seen[i].sampling.seed, 40u + i % 3) << i;
    EXPECT_EQ(b.seen[i].prompt, i < 3 ? b.encode_prompt("abc") : b.encode_prompt("xy")) << i;
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);       // 3 + 2, once each
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);  // 6 choices x 2
  EXPECT_EQ(j["usage"]["total_tokens"], 17);
  b.seen.clear();
  r = h.handle(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 3})"));
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["message"]["content"], j["choices"][0]["message"]["content"]);
  ASSERT_EQ(b.seen.size(), 2u);
  EXPECT_NE(b.seen[0].sampling.seed, b.seen[1].sampling.seed);  // no seed: one drawn per choice
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  // Streaming chat: a role chunk, text and a finish chunk per index; usage as above.
  h.set_backend(&stepped);
  r = h.handle(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 3, "max_tokens": 2,
                                               "stream": true, "stream_options": {"include_usage": true}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::vector<json> ev = sse_json(drain_stream(*r.stream, &stepped));
  std::map<int, StreamedChoice> got = per_choice(ev);
  ASSERT_EQ(got.size(), 3u);  // indices 0, 1, 2
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].roles, 1) << i;
    EXPECT_EQ(got[i].finishes, 1) << i;
    EXPECT_EQ(got[i].text, "us") << i;  // the echo model repeats the chat prompt "user: hi\n..."
  }
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["completion_tokens"], 6);
  EXPECT_EQ(ev[ev.size() - 2]["usage"]["prompt_tokens"], static_cast<int>(stepped.seen[0].prompt.size()));
  EXPECT_EQ(stepped.metrics().kv_bytes_used, 0u);
}

// echo with logprobs: the engine is asked for the prompt's logprobs (prompt_logprobs = logprobs),
// and each choice's logprobs cover the echoed prompt first (its first token null, OpenAI's shape),
// then the generated tokens, text_offset running over the whole text. Streamed, the echo goes out
// with the first generated token and its logprobs.
TEST(ServerHandler, EchoWithLogprobsCoversThePrompt) {
  ApiHandler h({});
  Recording b(256, 4, true);
  h.set_backend(&b);
  Recording stepped(256, 4);  // declared before the responses: their streams reference it
  HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2, "echo": true, "logprobs": 1})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(b.seen.back().prompt_logprobs, 1);
  const json lp = json::parse(r.body)["choices"][0]["logprobs"];
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], "abcab");
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], json::parse("[null, -0.25, -0.25, -0.5, -0.5]"));
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["top_logprobs"][1], json::parse(R"({"b": -0.25})"));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4}));
  EXPECT_EQ(h.handle(post("/v1/completions", R"({"prompt": "abc", "max_tokens": 2, "logprobs": 1})")).status, 200);
  EXPECT_EQ(b.seen.back().prompt_logprobs, -1);  // without echo the prompt's logits are not wanted
  h.set_backend(&stepped);
  r = h.handle(post("/v1/completions", R"({"prompt": ["ab", "xyz"], "max_tokens": 2, "echo": true, "logprobs": 0, "stream": true})"));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text[2];
  json tokens[2] = {json::array(), json::array()}, offsets[2] = {json::array(), json::array()};
  for (const json& e : sse_json(drain_stream(*r.stream, &stepped))) {
    if (!e.is_object() || e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
    const json& c = e["choices"][0];
    const int i = c["index"].get<int>();
    text[i] += c["text"].get<std::string>();
    for (const json& t : c["logprobs"]["tokens"]) tokens[i].push_back(t);
    for (const json& o : c["logprobs"]["text_offset"]) offsets[i].push_back(o);
  }
  EXPECT_EQ(text[0], "abab");
  EXPECT_EQ(tokens[0], json({"a", "b", "a", "b"}));
  EXPECT_EQ(offsets[0], json({0, 1, 2, 3}));
  EXPECT_EQ(text[1], "xyzxy");
  EXPECT_EQ(tokens[1], json({"x", "y", "z", "x", "y"}));
}

TEST(ServerHandler, TokenIdsAreCheckedAgainstTheVocabulary) {
  ApiHandler h({});
  EchoBackend b(256, 4, true);  // vocabulary: 257 ids
  h.set_backend(&b);
  const std::pair<std::string, std::string> cases[] = {
      {R"({"prompt": [1, 257]})", "prompt"},
      {R"({"prompt": "a", "stop_token_ids": [300]})", "stop_token_ids"},
      {R"({"prompt": "a", "logit_bias": {"257": 1}})", "logit_bias"},
  };
  for (const auto& [body, param] : cases) {
    const HttpResponse r = h.handle(post("/v1/completions", body));
    EXPECT_EQ(r.status, 400) << body;
    EXPECT_EQ(json::parse(r.body)["error"]["param"], param) << body;
  }
  const HttpResponse r = h.handle(post("/detokenize", R"({"tokens": [257]})"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "tokens");
  EXPECT_EQ(h.handle(post("/v1/completions", R"({"prompt": [256], "max_tokens": 1})")).status, 200);
}

// stop_token_ids end the choice (the token's text is not shown); the new sampling fields reach
// the engine's parameters (checked by a backend that records them).
TEST(ServerHandler, NewFieldsReachTheEngine) {
  ApiHandler h({});
  Recording b(256, 4, true);
  h.set_backend(&b);
  HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": "abcd", "max_tokens": 4, "stop_token_ids": [99],
      "presence_penalty": 0.5, "frequency_penalty": -1, "logit_bias": {"7": -100}, "priority": 3})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], "ab");  // 'c' = 99 stops, unseen
  EXPECT_EQ(json::parse(r.body)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(b.seen.back().stop_token_ids, std::vector<int32_t>{99});
  EXPECT_EQ(b.seen.back().sampling.presence_penalty, 0.5f);
  EXPECT_EQ(b.seen.back().sampling.frequency_penalty, -1.0f);
  EXPECT_EQ(b.seen.back().sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}}));
  EXPECT_EQ(b.seen.back().priority, 3);
}

// /tokenize answers llama-server's and vLLM's shapes; /detokenize both keys.
TEST(ServerHandler, TokenizeAndDetokenize) {
  ApiHandler h({});
  EchoBackend b(64, 4, true);
  h.set_backend(&b);
  HttpResponse r = h.handle(post("/tokenize", R"({"content": "hi"})"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["tokens"], json({104, 105}));
  EXPECT_EQ(j["count"], 2);
  EXPECT_EQ(j["max_model_len"], 64);
  r = h.handle(post("/tokenize", R"({"content": "hi", "with_pieces": true})"));
  EXPECT_EQ(json::parse(r.body)["tokens"], json::parse(R"([{"id": 104, "piece": "h"}, {"id": 105, "piece": "i"}])"));
  r = h.handle(post("/tokenize", R"({"prompt": "ok", "return_token_strs": true})"));
  EXPECT_EQ(json::parse(r.body)["token_strs"], json({"o", "k"}));
  r = h.handle(post("/tokenize", R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_EQ(json::parse(r.body)["count"], std::string("user: x\nassistant: ").size());
  r = h.handle(post("/detokenize", R"({"tokens": [104, 105]})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), json({{"content", "hi"}, {"prompt", "hi"}}));
  EXPECT_EQ(h.handle(get("/tokenize")).status, 405);
  EXPECT_EQ(h.handle(post("/tokenize", "{")).status, 400);
}

// A prompt list that does not fit the queue: 503, and the prompts already queued are aborted.
TEST(ServerHandler, QueueFullInAPromptListAbortsTheQueuedOnes) {
  ApiHandler h({});
  EchoBackend b(256, 2);
  h.set_backend(&b);
  const HttpResponse r = h.handle(post("/v1/completions", R"({"prompt": ["a", "b", "c"], "max_tokens": 50})"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(b.metrics().running, 2);
  b.step();  // the aborts take effect at the next step
  EXPECT_EQ(b.metrics().running, 0);
  EXPECT_EQ(b.metrics().kv_bytes_used, 0u);
}

TEST(ServerHandler, QueueFullGives503WithRetryAfter) {
  HandlerOptions o;
  o.retry_after_seconds = 2;
  ApiHandler h(o);
  EchoBackend b(256, 1);  // holds one request; nobody steps it
  h.set_backend(&b);
  const HttpResponse first = h.handle(post("/v1/completions", R"({"prompt": "a", "max_tokens": 5, "stream": true})"));
  ASSERT_EQ(first.status, 200);
  const HttpResponse second = h.handle(post("/v1/completions", R"({"prompt": "a", "max_tokens": 5, "stream": true})"));
  EXPECT_EQ(second.status, 503);
  EXPECT_EQ(header(second, "Retry-After"), "2");
  EXPECT_EQ(json::parse(second.body)["error"]["code"], "queue_full");
}

// A handler over an EchoBackend that nobody steps but the test, and streams that would run for
// 50000 steps unless cancelled.
class LongStreams : public ::testing::Test {
 protected:
  LongStreams() { h.set_backend(&b); }
  HttpResponse start() { return h.handle(post("/v1/completions", R"({"prompt": "abc", "max_tokens": 50000, "stream": true})")); }
  ApiHandler h{{}};
  EchoBackend b{100000, 4};
};

TEST_F(LongStreams, CancelledOrDroppedStreamAbortsItsRequest) {
  HttpResponse r = start();
  ASSERT_TRUE(r.stream);
  b.step();
  b.step();
  EXPECT_GT(b.metrics().kv_bytes_used, 0u);
  EXPECT_EQ(h.in_flight().size(), 1u);
  r.stream->cancel();
  b.step();  // the abort takes effect at the next step
  EXPECT_EQ(b.metrics().kv_bytes_used, 0u);
  r.stream.reset();
  EXPECT_EQ(h.in_flight().size(), 0u);

  // A stream dropped without a word (its connection died before the first write) aborts too.
  r = start();
  b.step();
  r.stream.reset();
  b.step();
  EXPECT_EQ(b.metrics().running, 0);
}

TEST_F(LongStreams, DrainAbortsWhatOutlivesTheDeadline) {
  HttpResponse r = start();
  ASSERT_TRUE(r.stream);
  size_t aborted = 0;
  std::thread t([&] { aborted = drain(h, b, 50ms, 2000ms); });
  std::string sse;
  for (int i = 0; i < 1000 && sse.find("\"error\"") == std::string::npos; ++i) {
    std::string piece;
    r.stream->next(piece, 0ms);
    sse += piece;
    b.step();
    std::this_thread::sleep_for(1ms);
  }
  r.stream.reset();
  t.join();
  EXPECT_EQ(aborted, 1u);
  EXPECT_NE(sse.find("shutting down"), std::string::npos) << sse;
  EXPECT_EQ(b.metrics().running, 0);
  EXPECT_EQ(h.handle(post("/v1/completions", R"({"prompt": "a"})")).status, 503);  // no new work
}

namespace {
// An EchoBackend that fails on purpose: add_request throws what `thrower` throws (nothing when
// it is empty), and, when `bad_text` is set, token_text('b') throws an InternalError. For the
// prompt "aaaa" with 2 logprobs, 'b' is only an alternative: EchoBackend never asks for its text,
// the server does while it writes the answer.
class FailingBackend : public EchoBackend {
 public:
  using EchoBackend::EchoBackend;
  uint64_t add_request(RequestParams params, OutputCallback on_output) override {
    if (thrower) thrower();
    return EchoBackend::add_request(std::move(params), std::move(on_output));
  }
  std::string token_text(int32_t id) const override {
    if (bad_text && id == 'b') throw InternalError("token_text: page 17 of sequence 3 is gone");
    return EchoBackend::token_text(id);
  }
  std::function<void()> thrower;
  bool bad_text = false;
};

const char kSecret[] = "page 17 of sequence 3";  // what a bug's message holds; a client never sees it

void expect_generic_500(const HttpResponse& r) {
  EXPECT_EQ(r.status, 500) << r.body;
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(e["message"], internal_server_error().what());
  EXPECT_EQ(r.body.find(kSecret), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("internal error:"), std::string::npos) << r.body;
}
}  // namespace

TEST(ServerHandler, BugsGet500WithAGenericBodyAndInputErrors400) {
  ApiHandler h({});
  FailingBackend b(64, 4, true);
  h.set_backend(&b);
  b.thrower = [] { throw InternalError(std::string("scheduler: ") + kSecret + " is queued twice"); };
  expect_generic_500(h.handle(post("/v1/chat/completions", kChat)));
  b.thrower = [] { throw std::out_of_range(std::string("map::at ") + kSecret); };  // not an Error: a bug too
  expect_generic_500(h.handle(post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2})")));
  b.thrower = [] { throw Error("the request needs 9000 KV bytes, more than the budget"); };  // input: 400, as said
  HttpResponse r = h.handle(post("/v1/chat/completions", kChat));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error");
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "the request needs 9000 KV bytes, more than the budget");
  // A bug while the answer is written (after the request was accepted) is a 500 as well.
  b.thrower = nullptr;
  b.bad_text = true;
  expect_generic_500(h.handle(post("/v1/completions", R"({"prompt": "aaaa", "max_tokens": 2, "logprobs": 2})")));
  b.bad_text = false;
  EXPECT_EQ(h.handle(post("/v1/chat/completions", kChat)).status, 200);  // and the server goes on
}

TEST(ServerHttp, ABugMidStreamEndsItWithAGenericErrorEvent) {
  ApiHandler h({});
  FailingBackend b(100000, 8);
  Stepper stepper(b);
  h.set_backend(&b);
  HttpServer srv(h, {"127.0.0.1", 0});
  const int port = srv.start();
  ASSERT_GT(port, 0);
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);
  b.bad_text = true;
  auto res = cli.Post("/v1/completions", R"({"prompt": "aaaa", "max_tokens": 4, "logprobs": 2, "stream": true})",
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);  // the status went out before the bug
  EXPECT_NE(res->body.find("\"server_error\""), std::string::npos) << res->body;
  EXPECT_NE(res->body.find(internal_server_error().what()), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find(kSecret), std::string::npos) << res->body;
  EXPECT_EQ(res->body.find("[DONE]"), std::string::npos) << res->body;
  bool freed = false;  // the failed stream's request was aborted
  for (int i = 0; i < 500 && !freed; ++i) {
    freed = b.metrics().running == 0 && h.in_flight().size() == 0;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(freed);
  srv.stop();
}

TEST(ServerHttp, OverLoopbackSockets) {
  HandlerOptions o;
  o.api_key = "k";
  o.max_body_bytes = 4096;
  ApiHandler h(o);
  EchoBackend b(100000, 8);
  Stepper stepper(b);
  HttpServer srv(h, {"127.0.0.1", 0});
  const int port = srv.start();
  ASSERT_GT(port, 0);
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(10, 0);

  auto res = cli.Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);  // loading
  h.set_backend(&b);
  EXPECT_EQ(cli.Get("/health")->status, 200);
  EXPECT_EQ(cli.Get("/v1/models")->status, 401);
  const httplib::Headers auth = {{"Authorization", "Bearer k"}};
  EXPECT_EQ(cli.Get("/v1/models", auth)->status, 200);
  res = cli.Get("/elsewhere", auth);
  EXPECT_EQ(res->status, 404);
  EXPECT_TRUE(json::parse(res->body).contains("error"));
  res = cli.Post("/v1/completions", auth, std::string(5000, 'x'), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_TRUE(json::parse(res->body).contains("error")) << res->body;
  res = cli.Post("/v1/completions", auth, R"({"prompt": "hello", "max_tokens": 3})", "application/json");
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["choices"][0]["text"], "hel");

  // Streaming to the end.
  std::string sse;
  res = cli.Post("/v1/completions", auth, R"({"prompt": "hello", "max_tokens": 4, "stream": true})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("data: [DONE]\n\n"), std::string::npos) << res->body;

  // A client that goes away mid-stream: its request is aborted and its bytes freed.
  {
    httplib::Client quitter("127.0.0.1", port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = auth;
    req.body = R"({"prompt": "hello", "max_tokens": 90000, "stream": true})";
    req.set_header("Content-Type", "application/json");
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    quitter.send(req);  // returns once the receiver said stop; the connection is closed
    EXPECT_GE(chunks, 3);
  }
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    freed = b.metrics().running == 0 && h.in_flight().size() == 0;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(freed) << "running " << b.metrics().running << ", in flight " << h.in_flight().size();
  srv.stop();
}

TEST(ServerHttp, StopRightAfterStartReturns) {
  ApiHandler h({});
  for (int i = 0; i < 20; ++i) {
    HttpServer srv(h, {"127.0.0.1", 0});
    ASSERT_GT(srv.start(), 0);
    srv.stop();  // must not hang (ctest's timeout would catch it)
  }
}

TEST(ServerShutdown, SignalIsTakenByWait) {
  ShutdownSignal signals;  // blocks SIGINT / SIGTERM in this thread
  EXPECT_EQ(signals.wait(10ms), 0);
  ASSERT_EQ(raise(SIGTERM), 0);  // thread-directed: stays pending until wait() takes it
  EXPECT_EQ(signals.wait(1000ms), SIGTERM);
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(signals.wait(1000ms), SIGINT);
}

// chat_template_kwargs reaches the backend's chat prompt (EchoBackend writes "name=value" lines into
// it and echoes the prompt back), on chat completions and on vLLM's /tokenize messages form; a
// non-object is a 400 naming the field.
TEST(ServerHandler, ChatTemplateKwargsReachTheChatPrompt) {
  ApiHandler h({});
  EchoBackend b(256, 4, true);
  h.set_backend(&b);
  HttpResponse r = h.handle(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
      "max_tokens": 30, "chat_template_kwargs": {"enable_thinking": false}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "user: x\nenable_thinking=false\n");
  r = h.handle(post("/tokenize", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"k": [1]}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["count"], std::string("user: x\nk=[1]\nassistant: ").size());
  r = h.handle(post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": true})"));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "chat_template_kwargs");
}
