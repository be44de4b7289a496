// Tool calls and reasoning through the API handler (docs/serving.md, "Tool calls", "Reasoning"),
// with ScriptBackend: the request is rendered by a real model template of llama.cpp's
// models/templates (Qwen 2.5, Qwen 3, a DeepSeek-R1 distill) and the "model" says what the test's
// last user message says, so the answer's parser runs on a known output. Non-streaming answers and
// streams (tool-call deltas assembled as the openai client does) must agree.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/grammar_compiler.h"
#include "server/api_handler.h"
#include "support/script_backend.h"
#include "test_grammar_support.h"

using namespace mpkv;
using namespace mpkv::server;
using json = nlohmann::ordered_json;  // bodies keep the key order written here
using namespace std::chrono_literals;

namespace {
std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MPKV_JINJA_TEMPLATES) + "/" + name);
  EXPECT_TRUE(in) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kQwen25 = "Qwen-Qwen2.5-7B-Instruct.jinja";
const char* kQwen3 = "Qwen-Qwen3-0.6B.jinja";
const char* kR1 = "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja";

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}])");
const std::string kCall = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"b\": 1, \"a\": 2}}\n</tool_call>";

struct Served {
  explicit Served(const std::string& tmpl, HandlerOptions opts = {})
      : backend(tmpl.empty() ? "" : read_template(tmpl), 4096, 8, /*immediate=*/true), handler(opts) {
    handler.set_backend(&backend);
  }
  ScriptBackend backend;
  ApiHandler handler;

  HttpResponse post(const json& body) { return handler.handle({"POST", "/v1/chat/completions", "", body.dump(), nullptr}); }
  json answer(const json& body) {
    HttpResponse r = post(body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  }
  // A stream read to its end, as its events.
  std::vector<json> stream(json body) {
    body["stream"] = true;
    HttpResponse r = post(body);
    EXPECT_EQ(r.status, 200) << r.body;
    std::string all, piece;
    for (int i = 0; i < 10000 && r.stream; ++i) {
      const bool more = r.stream->next(piece, 0ms);
      all += piece;
      if (!more) break;
    }
    std::vector<json> events;
    for (size_t pos = 0; pos < all.size();) {
      const size_t end = all.find("\n\n", pos);
      if (end == std::string::npos) break;
      if (all.compare(pos, 6, "data: ") == 0 && all.compare(pos + 6, 6, "[DONE]") != 0)
        events.push_back(json::parse(all.substr(pos + 6, end - pos - 6)));
      pos = end + 2;
    }
    return events;
  }
};

json user(const std::string& says) { return {{"messages", {{{"role", "user"}, {"content", says}}}}}; }

// A stream assembled the way the openai client's ChatCompletionStreamState does: content and
// reasoning concatenated; tool calls by index, id / type / name from the first delta of an index,
// arguments concatenated.
struct Assembled {
  std::string content, reasoning, reasoning_vllm, finish;
  std::map<int, json> calls;
};
Assembled assemble(const std::vector<json>& events) {
  Assembled a;
  for (const json& e : events) {
    if (e["choices"].empty()) continue;  // the usage chunk
    const json& c = e["choices"][0];
    const json& d = c["delta"];
    if (d.contains("content") && d["content"].is_string()) a.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) a.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("reasoning")) a.reasoning_vllm += d["reasoning"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& tc : d["tool_calls"]) {
        json& call = a.calls[tc["index"].get<int>()];
        if (call.is_null()) {
          EXPECT_TRUE(tc.contains("id") && tc["function"].contains("name")) << "the first delta of a call names it: " << tc;
          call = {{"id", tc["id"]}, {"type", tc["type"]}, {"name", tc["function"]["name"]}, {"arguments", ""}};
        } else {
          EXPECT_FALSE(tc.contains("id")) << tc;
        }
        call["arguments"] = call["arguments"].get<std::string>() + tc["function"].value("arguments", "");
      }
    if (!c["finish_reason"].is_null()) a.finish = c["finish_reason"];
  }
  return a;
}
}  // namespace

TEST(ServerTools, HermesCallNonStreaming) {
  Served s(kQwen25);
  json body = user(kCall);
  body["tools"] = kTools;
  const json a = s.answer(body);
  const json& m = a["choices"][0]["message"];
  EXPECT_EQ(a["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["content"].is_null()) << m;
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  const json& tc = m["tool_calls"][0];
  EXPECT_EQ(tc["type"], "function");
  EXPECT_EQ(tc["id"].get<std::string>().rfind("call_", 0), 0u) << tc;
  EXPECT_EQ(tc["function"]["name"], "get_weather");
  EXPECT_EQ(tc["function"]["arguments"], R"({"city":"Paris","b":1,"a":2})");
  // The tools reached the template in the client's key order (Qwen 2.5 lists them in <tools>).
  const std::string prompt = s.backend.last_prompt();
  EXPECT_NE(prompt.find("<tools>"), std::string::npos) << prompt;
  EXPECT_LT(prompt.find("\"zeta\""), prompt.find("\"alpha\"")) << prompt;
}

TEST(ServerTools, HermesCallsStreamedAsTheClientAssemblesThem) {
  Served s(kQwen25);
  json body = user("Checking. " + kCall + "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"x\": 1}}\n</tool_call>");
  body["tools"] = kTools;
  const std::vector<json> events = s.stream(body);
  const Assembled a = assemble(events);
  EXPECT_EQ(a.finish, "tool_calls");
  EXPECT_EQ(a.content, "Checking. ");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls.at(0)["name"], "get_weather");
  EXPECT_EQ(a.calls.at(0)["arguments"], R"({"city":"Paris","b":1,"a":2})");
  EXPECT_EQ(a.calls.at(1)["name"], "add");
  EXPECT_NE(a.calls.at(0)["id"], a.calls.at(1)["id"]);
  for (const json& e : events) EXPECT_EQ(e.dump().find("<tool_call>"), std::string::npos) << "markup streamed: " << e;
  // The same answer without streaming.
  const json m = s.answer(body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], a.content);
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], a.calls.at(1)["arguments"]);
}

// OpenAI's delta sequence for a streamed call: a head {index, id, type, function: {name, arguments:
// ""}}, then {index, function: {arguments}} pieces as the model writes them (the script model writes
// a byte per step, so the arguments come in many pieces), which concatenate to the non-streamed
// arguments; no markup is ever content.
TEST(ServerTools, ArgumentsStreamInPiecesAsGenerated) {
  Served s(kQwen25);
  json body = user(kCall);
  body["tools"] = kTools;
  const std::vector<json> events = s.stream(body);
  std::vector<json> deltas;
  for (const json& e : events) {
    const json& d = e["choices"][0]["delta"];
    if (d.contains("tool_calls")) deltas.push_back(d["tool_calls"].at(0));
    if (d.contains("content")) EXPECT_EQ(d["content"], "") << e;
  }
  ASSERT_GT(deltas.size(), 3u);
  const json& head = deltas[0];
  EXPECT_EQ(head["index"], 0);
  EXPECT_EQ(head["type"], "function");
  EXPECT_EQ(head["function"]["name"], "get_weather");
  EXPECT_EQ(head["function"]["arguments"], "");
  EXPECT_EQ(head["id"].get<std::string>().rfind("call_", 0), 0u);
  std::string args;
  for (size_t i = 1; i < deltas.size(); ++i) {
    EXPECT_EQ(deltas[i].size(), 2u) << "only index and function.arguments: " << deltas[i];
    EXPECT_EQ(deltas[i]["index"], 0);
    args += deltas[i]["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(args, R"({"city":"Paris","b":1,"a":2})");
  const json m = s.answer(body)["choices"][0]["message"];
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], args);
  EXPECT_EQ(assemble(events).finish, "tool_calls");
}

// parallel_tool_calls false: the request ends as soon as the first call is complete (the second one
// is never generated: the script model's tokens are the reply's bytes, so completion_tokens is the
// first call's length), finish_reason tool_calls, streamed or not.
TEST(ServerTools, ParallelFalseStopsAfterTheFirstCall) {
  Served s(kQwen25);
  const std::string second = "\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"x\": 1}}\n</tool_call>";
  json body = user(kCall + second);
  body["tools"] = kTools;
  json a = s.answer(body);  // parallel calls: both, and the end token
  EXPECT_EQ(a["choices"][0]["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(a["usage"]["completion_tokens"], kCall.size() + second.size() + 1);
  body["parallel_tool_calls"] = false;
  a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "tool_calls");
  const json& m = a["choices"][0]["message"];
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(m["content"].is_null()) << m;
  EXPECT_EQ(a["usage"]["completion_tokens"], kCall.size());
  body["stream_options"] = {{"include_usage", true}};
  const std::vector<json> events = s.stream(body);
  const Assembled st = assemble(events);
  EXPECT_EQ(st.finish, "tool_calls");
  ASSERT_EQ(st.calls.size(), 1u);
  EXPECT_EQ(st.calls.at(0)["arguments"], m["tool_calls"][0]["function"]["arguments"]);
  EXPECT_EQ(st.content, "");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], kCall.size());
  // Text before the call stays; a plain answer is not cut.
  body = user("Sure. " + kCall + second);
  body["tools"] = kTools;
  body["parallel_tool_calls"] = false;
  a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["message"]["content"], "Sure. ");
  EXPECT_EQ(a["usage"]["completion_tokens"], 6 + kCall.size());
  body = user("No call here.");
  body["tools"] = kTools;
  body["parallel_tool_calls"] = false;
  a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(a["usage"]["completion_tokens"], 14);
}

TEST(ServerTools, ChoiceNoneRendersToolsButParsesNothing) {
  Served s(kQwen25);
  json body = user(kCall);
  body["tools"] = kTools;
  body["tool_choice"] = "none";
  const json a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(a["choices"][0]["message"]["content"], kCall);
  EXPECT_FALSE(a["choices"][0]["message"].contains("tool_calls"));
  EXPECT_NE(s.backend.last_prompt().find("<tools>"), std::string::npos);
}

TEST(ServerTools, PlainAnswerWithToolsStaysContent) {
  Served s(kQwen25);
  json body = user("It is sunny.");
  body["tools"] = kTools;
  const json a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(a["choices"][0]["message"]["content"], "It is sunny.");
  const Assembled st = assemble(s.stream(body));
  EXPECT_EQ(st.content, "It is sunny.");
  EXPECT_EQ(st.finish, "stop");
}

TEST(ServerTools, ToolLoopHistoryIsRenderedByTheTemplate) {
  Served s(kQwen25);
  json body = {{"tools", kTools},
               {"messages", json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 21 C"}])")}};
  const json a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["message"]["content"], "The tool said: sunny, 21 C");
  EXPECT_EQ(a["choices"][0]["finish_reason"], "stop");
  const std::string prompt = s.backend.last_prompt();
  EXPECT_NE(prompt.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"),
            std::string::npos) << prompt;
  EXPECT_NE(prompt.find("<tool_response>\nsunny, 21 C\n</tool_response>"), std::string::npos) << prompt;
}

TEST(ServerTools, HostileInputsGet400) {
  Served s(kQwen25);
  json body = user("hi");
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "unknown_tool"}}}};
  EXPECT_EQ(s.post(body).status, 400);
  body = user("hi");
  body["messages"].push_back({{"role", "assistant"}, {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{oops"}}}}}}});
  const HttpResponse r = s.post(body);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << r.body;
  body = user("hi");
  body["tools"] = json::array();
  for (int i = 0; i < 1000; ++i) body["tools"].push_back({{"type", "function"}, {"function", {{"name", "f" + std::to_string(i)}}}});
  EXPECT_EQ(s.post(body).status, 400);
  EXPECT_EQ(s.backend.metrics().running, 0);  // nothing was queued
}

TEST(ServerReasoning, ThinkingGoesToReasoningContent) {
  Served s(kQwen3);
  const json body = user("<think>\nThe user greets me.\n</think>\n\nHello!");
  const json m = s.answer(body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "Hello!");
  EXPECT_EQ(m["reasoning_content"], "The user greets me.\n");
  EXPECT_EQ(m["reasoning"], m["reasoning_content"]);  // vLLM's newer name
  const Assembled a = assemble(s.stream(body));
  EXPECT_EQ(a.content, "Hello!");
  EXPECT_EQ(a.reasoning, "The user greets me.\n");
  EXPECT_EQ(a.reasoning_vllm, a.reasoning);
  EXPECT_EQ(a.finish, "stop");
}

TEST(ServerReasoning, ThinkingThenToolCall) {
  Served s(kQwen3);
  json body = user("<think>\nI need the weather.\n</think>\n\n" + kCall);
  body["tools"] = kTools;
  const json a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(a["choices"][0]["message"]["reasoning_content"], "I need the weather.\n");
  EXPECT_EQ(a["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(ServerReasoning, PromptThatOpensThinking) {
  Served s(kR1);
  const json m = s.answer(user("The user wants 2+2.\n</think>\n\nThe answer is 4."))["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "The user wants 2+2.\n");
  EXPECT_EQ(m["content"], "The answer is 4.");
}

TEST(ServerReasoning, EnableThinkingFalseAndBudgetZero) {
  Served s(kQwen3);
  json body = user("Hello there.");
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  EXPECT_EQ(s.answer(body)["choices"][0]["message"]["content"], "Hello there.");
  const std::string off = s.backend.last_prompt();
  EXPECT_NE(off.find("<think>\n\n</think>"), std::string::npos) << off;  // Qwen3's empty think block
  body = user("Hello there.");
  body["reasoning_budget_tokens"] = 0;  // no thinking: the template's switch
  s.answer(body);
  EXPECT_EQ(s.backend.last_prompt(), off);
  // The server's default (--reasoning-budget 0) does the same; a request's -1 means that default.
  HandlerOptions zero;
  zero.reasoning_budget = 0;
  Served z(kQwen3, zero);
  body = user("Hello there.");
  z.answer(body);
  EXPECT_EQ(z.backend.last_prompt(), off);
  body["reasoning_budget_tokens"] = -1;
  z.answer(body);
  EXPECT_EQ(z.backend.last_prompt(), off);
  body["reasoning_budget_tokens"] = 100;  // a budget, thinking on
  z.answer(body);
  EXPECT_NE(z.backend.last_prompt(), off);
}

TEST(ServerReasoning, FormatNoneAndIncludeReasoningFalse) {
  Served s(kQwen3);
  const std::string text = "<think>x</think>y";
  json body = user(text);
  body["reasoning_format"] = "none";
  EXPECT_EQ(s.answer(body)["choices"][0]["message"]["content"], text);
  body = user(text);
  body["include_reasoning"] = false;
  const json m = s.answer(body)["choices"][0]["message"];
  EXPECT_EQ(m["content"], "y");
  EXPECT_FALSE(m.contains("reasoning_content"));
  EXPECT_TRUE(assemble(s.stream(body)).reasoning.empty());
}

TEST(ServerTools, TheFuzzersSmallTemplateRendersAndParses) {
  ScriptBackend backend(kSmallToolTemplate, 4096, 8, /*immediate=*/true);
  ApiHandler handler{HandlerOptions{}};
  handler.set_backend(&backend);
  json body = user("<think>t</think>" + kCall);
  body["tools"] = kTools;
  const HttpResponse r = handler.handle({"POST", "/v1/chat/completions", "", body.dump(), nullptr});
  ASSERT_EQ(r.status, 200) << r.body;
  const json m = json::parse(r.body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "t");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_NE(backend.last_prompt().find("<tools>{"), std::string::npos) << backend.last_prompt();
}

// A ScriptBackend that compiles constraints (for a byte vocabulary; EchoBackend does not apply
// them) and keeps the engine parameters of the last request, to see where its grammar starts.
class RecordingBackend : public ScriptBackend {
 public:
  explicit RecordingBackend(const std::string& tmpl) : ScriptBackend(read_template(tmpl), 4096, 8, /*immediate=*/true) {}
  std::shared_ptr<const CompiledConstraint> compile_constraint(const Constraint& c) override { return compiler_.compile(c); }
  uint64_t add_request(RequestParams p, OutputCallback cb) override {
    last = p;
    return ScriptBackend::add_request(std::move(p), std::move(cb));
  }
  RequestParams last;

 private:
  Tokenizer tok_ = test::byte_tokenizer();
  GrammarCompiler compiler_{tok_, 300};
};

// A constrained answer after a prompt that opened <think> (the R1 distill's template): the grammar
// starts after the end-of-thinking tag (grammar_after, engine/grammar_gate.h), whatever the
// reasoning format; a prompt that opens nothing (Qwen 2.5), or no constraint, starts it at once.
// A forced tool call (named tool_choice) is read after the thinking.
TEST(ServerReasoning, GrammarStartsAfterThePromptOpenedThinking) {
  RecordingBackend r1(kR1), qwen(kQwen25);
  ApiHandler h1{HandlerOptions{}}, h2{HandlerOptions{}};
  h1.set_backend(&r1);
  h2.set_backend(&qwen);
  auto post = [](ApiHandler& h, const json& body) {
    const HttpResponse r = h.handle({"POST", "/v1/chat/completions", "", body.dump(), nullptr});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body) : json();
  };
  json body = user("The user wants JSON.\n</think>\n\n{\"a\": 1}");
  body["response_format"] = {{"type", "json_object"}};
  json m = post(h1, body)["choices"][0]["message"];
  EXPECT_EQ(r1.last.grammar_after, r1.encode_special("</think>"));
  ASSERT_TRUE(r1.last.grammar);
  EXPECT_EQ(m["reasoning_content"], "The user wants JSON.\n");
  EXPECT_EQ(m["content"], "{\"a\": 1}");
  body["reasoning_format"] = "none";  // shown in the content, but the tokens are the same
  post(h1, body);
  EXPECT_EQ(r1.last.grammar_after, r1.encode_special("</think>"));
  post(h2, body);
  EXPECT_TRUE(qwen.last.grammar && qwen.last.grammar_after.empty());
  post(h1, user("No constraint.\n</think>\n\nHi."));
  EXPECT_TRUE(!r1.last.grammar && r1.last.grammar_after.empty());
  body = user("Weather needed.\n</think>{\"zeta\": \"Paris\"}");
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const json a = post(h1, body)["choices"][0];
  EXPECT_EQ(r1.last.grammar_after, r1.encode_special("</think>"));
  EXPECT_EQ(a["finish_reason"], "tool_calls") << a;
  EXPECT_EQ(a["message"]["reasoning_content"], "Weather needed.\n");
  EXPECT_EQ(a["message"]["tool_calls"][0]["function"]["arguments"], "{\"zeta\":\"Paris\"}");
}

TEST(ServerTools, NoTemplateMeansNoParsing) {
  Served s("");  // a model without tokenizer.chat_template: the text is the answer
  json body = user(kCall);
  const json a = s.answer(body);
  EXPECT_EQ(a["choices"][0]["message"]["content"], kCall);
}
