// The tool-calling and reasoning fields of a chat request (tool_request.h, reasoning_request.h):
// accepted shapes, key order kept, and a 400 naming the field for each malformed one.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/tool_schema.h"

using namespace mpkv::server;

namespace {
CompletionRequest chat(const std::string& body) { return parse_completion_request(Endpoint::chat, body); }

std::string error_param(const std::string& body, Endpoint e = Endpoint::chat) {
  try {
    parse_completion_request(e, body);
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 400) << body;
    return err.param();
  }
  return "<no error>";
}

const std::string kMsg = R"("messages": [{"role": "user", "content": "hi"}])";
const std::string kTools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
    "parameters": {"type": "object", "properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "add"}}])";
std::string with(const std::string& extra) { return "{" + kMsg + ", " + kTools + (extra.empty() ? "" : ", " + extra) + "}"; }
}  // namespace

TEST(ServerToolRequest, ToolsKeepTheirOrder) {
  const CompletionRequest r = chat(with(""));
  ASSERT_EQ(r.tools.tools.size(), 2u);
  EXPECT_EQ(r.tools.tools[0].name, "get_weather");
  EXPECT_EQ(r.tools.tools[0].description, "d");
  // "zeta" before "alpha", as sent (a sorted parse would swap them).
  EXPECT_EQ(r.tools.tools[0].parameters, R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  EXPECT_EQ(r.tools.tools[1].parameters, "");
  EXPECT_EQ(r.tools.choice, ToolChoice::automatic);  // OpenAI's default with tools
  EXPECT_TRUE(r.tools.parallel_tool_calls);
  EXPECT_EQ(chat("{" + kMsg + "}").tools.choice, ToolChoice::none);  // and without
  EXPECT_FALSE(chat(with(R"("parallel_tool_calls": false)")).tools.parallel_tool_calls);
  EXPECT_EQ(chat(with(R"("tool_choice": "none")")).tools.choice, ToolChoice::none);
  EXPECT_EQ(chat(with(R"("tool_choice": "auto")")).tools.choice, ToolChoice::automatic);
}

TEST(ServerToolRequest, MalformedToolsNameTheField) {
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": {}})"), "tools");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [3]})"), "tools[0]");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "code", "function": {"name": "f"}}]})"), "tools[0].type");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function"}]})"), "tools[0].function");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {}}]})"), "tools[0].function.name");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": "a b"}}]})"), "tools[0].function.name");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": ""}}]})"), "tools[0].function.name");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": ")" + std::string(65, 'x') + R"("}}]})"),
            "tools[0].function.name");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})"),
            "tools[0].function.parameters");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": "f", "description": 1}}]})"),
            "tools[0].function.description");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})"),
            "tools[1].function.name");  // twice
  std::string many = "{" + kMsg + R"(, "tools": [)";
  for (int i = 0; i <= kMaxTools; ++i) many += std::string(i ? "," : "") + R"({"type": "function", "function": {"name": "f)" + std::to_string(i) + R"("}})";
  EXPECT_EQ(error_param(many + "]}"), "tools");  // kMaxTools + 1
  EXPECT_EQ(error_param(with(R"("parallel_tool_calls": 1)")), "parallel_tool_calls");
}

TEST(ServerToolRequest, ToolChoice) {
  EXPECT_EQ(error_param(with(R"("tool_choice": "sometimes")")), "tool_choice");
  EXPECT_EQ(error_param(with(R"("tool_choice": 1)")), "tool_choice");
  EXPECT_EQ(error_param(with(R"("tool_choice": {"type": "function", "function": {"name": "nope"}})")), "tool_choice.function.name");
  EXPECT_EQ(error_param(with(R"("tool_choice": {"type": "other", "function": {"name": "add"}})")), "tool_choice.type");
  EXPECT_EQ(error_param(with(R"("tool_choice": {"type": "function"})")), "tool_choice.function");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "tool_choice": "required"})"), "tool_choice");  // no tools
  // Valid: the request carries the forced call's schema as its constraint, named after tool_choice;
  // a constraining field besides is refused, naming that field.
  for (const std::string c : {R"("required")", R"({"type": "function", "function": {"name": "add"}})"}) {
    const CompletionRequest r = chat(with(R"("tool_choice": )" + c));
    ASSERT_TRUE(r.constraint.has_value()) << c;
    EXPECT_EQ(r.constraint->kind, mpkv::ConstraintKind::json_schema);
    EXPECT_EQ(r.constraint->text, forced_tool_call_schema(r.tools));
    EXPECT_EQ(r.constraint_field, "tool_choice");
    EXPECT_EQ(error_param(with(R"("tool_choice": )" + c + R"(, "response_format": {"type": "json_object"})")), "response_format");
  }
  EXPECT_FALSE(chat(with(R"("tool_choice": "auto")")).constraint.has_value());
  const ToolRequest named = parse_tool_request(nlohmann::ordered_json::parse(with(R"("tool_choice": {"type": "function", "function": {"name": "add"}})")));
  EXPECT_EQ(named.choice, ToolChoice::named);
  EXPECT_EQ(named.named, "add");
  EXPECT_EQ(parse_tool_request(nlohmann::ordered_json::parse(with(R"("tool_choice": "required")"))).choice, ToolChoice::required);
}

TEST(ServerToolRequest, LegacyFunctionsAreRefused) {
  EXPECT_EQ(error_param("{" + kMsg + R"(, "functions": [{"name": "f"}]})"), "functions");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "function_call": "auto"})"), "function_call");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "functions": []})"), "<no error>");  // empty: nothing asked
  EXPECT_EQ(error_param(R"({"prompt": "p", "tools": []})", Endpoint::completions), "tools");
  EXPECT_EQ(error_param(R"({"prompt": "p", "tool_choice": "auto"})", Endpoint::completions), "tool_choice");
}

TEST(ServerToolRequest, HistoryWithToolCallsAndResults) {
  const CompletionRequest r = chat(R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"zeta\": 1, \"alpha\": 2}"}},
        {"type": "function", "function": {"name": "add", "arguments": {"b": 1, "a": 2}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  const mpkv::ChatMessage& a = r.messages[1];
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.tool_calls.size(), 2u);
  EXPECT_EQ(a.tool_calls[0].id, "call_1");
  EXPECT_EQ(a.tool_calls[0].arguments, R"({"zeta": 1, "alpha": 2})");  // a string is kept as sent
  EXPECT_EQ(a.tool_calls[1].arguments, R"({"b":1,"a":2})");            // an object, in its order
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
}

TEST(ServerToolRequest, MalformedHistoryNamesTheField) {
  auto msgs = [](const std::string& assistant) {
    return R"({"messages": [{"role": "user", "content": "x"}, )" + assistant + "]}";
  };
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": {}})")), "messages[1].tool_calls");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [1]})")), "messages[1].tool_calls[0]");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"type": "function"}]})")), "messages[1].tool_calls[0].function");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})")),
            "messages[1].tool_calls[0].function.name");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]})")),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]})")),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]})")),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(error_param(msgs(R"({"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f", "arguments": "{}"}}]})")),
            "messages[1].tool_calls[0].type");
  EXPECT_EQ(error_param(msgs(R"({"role": "user", "content": "y", "tool_calls": []})")), "messages[1].tool_calls");
  EXPECT_EQ(error_param(msgs(R"({"role": "tool", "content": "y"})")), "messages[1].tool_call_id");
  EXPECT_EQ(error_param(msgs(R"({"role": "tool", "tool_call_id": 5, "content": "y"})")), "messages[1].tool_call_id");
  EXPECT_EQ(error_param(msgs(R"({"role": "user", "content": "y", "tool_call_id": "a"})")), "messages[1].tool_call_id");
}

TEST(ServerReasoningRequest, Fields) {
  CompletionRequest r = chat("{" + kMsg + "}");
  EXPECT_EQ(r.reasoning.format, ReasoningFormat::deepseek);
  EXPECT_TRUE(r.reasoning.include_reasoning);
  EXPECT_FALSE(r.reasoning.budget_tokens.has_value());
  r = chat("{" + kMsg + R"(, "reasoning_format": "none", "include_reasoning": false, "thinking_budget_tokens": 0})");
  EXPECT_EQ(r.reasoning.format, ReasoningFormat::none);
  EXPECT_FALSE(r.reasoning.include_reasoning);
  EXPECT_EQ(r.reasoning.budget_tokens, 0);
  EXPECT_EQ(chat("{" + kMsg + R"(, "reasoning_budget_tokens": -1})").reasoning.budget_tokens, -1);
  EXPECT_EQ(error_param("{" + kMsg + R"(, "reasoning_format": "xml"})"), "reasoning_format");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "include_reasoning": "yes"})"), "include_reasoning");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "reasoning_budget_tokens": -2})"), "reasoning_budget_tokens");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "reasoning_budget_tokens": 1.5})"), "reasoning_budget_tokens");
  EXPECT_EQ(error_param("{" + kMsg + R"(, "reasoning_budget_tokens": 5, "thinking_budget_tokens": 6})"), "thinking_budget_tokens");
}
