// The schema of tool_choice required / named and the reading of output generated under it
// (tool_schema.h), expectations written by hand from vLLM's shapes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/tool_schema.h"
#include "util/error.h"

using namespace mpkv;
using namespace mpkv::server;
using ojson = nlohmann::ordered_json;

namespace {
ToolRequest two_tools(ToolChoice c) {
  ToolRequest r;
  r.tools = {{"get_weather", "d", R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"},
             {"ping", "", ""}};
  r.choice = c;
  return r;
}
}  // namespace

TEST(ToolSchema, NamedIsTheFunctionsParameters) {
  ToolRequest r = two_tools(ToolChoice::named);
  r.named = "get_weather";
  EXPECT_EQ(forced_tool_call_schema(r), R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  r.named = "ping";
  EXPECT_EQ(forced_tool_call_schema(r), R"({"type":"object"})");  // no parameters: any object
  const auto calls = tool_calls_from_forced_output(r, R"({"x": 1})", "call_a_");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].id, "call_a_0");
  EXPECT_EQ(calls[0].name, "ping");
  EXPECT_EQ(calls[0].arguments, R"({"x":1})");
  EXPECT_THROW(tool_calls_from_forced_output(r, R"({"x": )", "c"), Error);  // cut by a length stop
  EXPECT_THROW(tool_calls_from_forced_output(r, "[1]", "c"), Error);
}

TEST(ToolSchema, RequiredIsAnArrayOfOneOfTheTools) {
  ToolRequest r = two_tools(ToolChoice::required);
  const ojson s = ojson::parse(forced_tool_call_schema(r));
  const ojson expected = ojson::parse(R"({"type": "array", "minItems": 1, "items": {"anyOf": [
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["get_weather"]},
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
       "required": ["name", "parameters"]},
      {"type": "object", "properties": {"name": {"type": "string", "enum": ["ping"]}, "parameters": {"type": "object"}},
       "required": ["name", "parameters"]}]}})");
  EXPECT_EQ(s, expected) << s.dump(1);
  r.parallel_tool_calls = false;
  EXPECT_EQ(ojson::parse(forced_tool_call_schema(r))["maxItems"], 1);
  const auto calls = tool_calls_from_forced_output(
      r, R"([{"name": "get_weather", "parameters": {"city": "Paris"}}, {"name": "ping", "parameters": {}}])", "id_");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(calls[1].id, "id_1");
  EXPECT_THROW(tool_calls_from_forced_output(r, "[]", "c"), Error);
  EXPECT_THROW(tool_calls_from_forced_output(r, R"([{"name": "nope", "parameters": {}}])", "c"), Error);
  EXPECT_THROW(tool_calls_from_forced_output(r, R"([{"name": "ping", "parameters": 3}])", "c"), Error);
}

TEST(ToolSchema, OnlyForRequiredOrNamed) {
  EXPECT_THROW(forced_tool_call_schema(two_tools(ToolChoice::automatic)), InternalError);
}
