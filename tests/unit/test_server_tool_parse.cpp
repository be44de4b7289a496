// The tool-call and thinking parsers (tool_call_parse.h, chat_output.h) on hand-written model
// outputs of each format, expectations written from the formats' documentation (tool_call_format.h);
// llama.cpp's own parses of outputs are compared in tests/golden/test_server_tool_call_golden.cpp.
// Streaming: any split of the output into pieces gives the same answer as the whole.
#include <gtest/gtest.h>

#include "server/chat_output.h"
#include "server/json_scan.h"
#include "server/tool_call_format.h"
#include "server/tool_call_parse.h"

using namespace mpkv::server;

namespace {
ChatDelta parse_whole(const ChatOutputOptions& o, const std::string& text) {
  ChatOutputParser p(o);
  ChatDelta d = p.push(text);
  ChatDelta end = p.finish();
  d.reasoning += end.reasoning;
  d.content += end.content;
  d.tool_calls = end.tool_calls;
  return d;
}

// The same text pushed `step` bytes at a time; every delta summed.
ChatDelta parse_pieces(const ChatOutputOptions& o, const std::string& text, size_t step) {
  ChatOutputParser p(o);
  ChatDelta sum;
  for (size_t i = 0; i < text.size(); i += step) {
    ChatDelta d = p.push(std::string_view(text).substr(i, step));
    EXPECT_TRUE(d.tool_calls.empty()) << "calls come only from finish()";
    sum.reasoning += d.reasoning;
    sum.content += d.content;
  }
  ChatDelta end = p.finish();
  sum.reasoning += end.reasoning;
  sum.content += end.content;
  sum.tool_calls = end.tool_calls;
  return sum;
}

ChatOutputOptions tools(ToolCallFormat f) {
  ChatOutputOptions o;
  o.tools = f;
  o.call_id_prefix = "id_";
  return o;
}

void expect_same_split(const ChatOutputOptions& o, const std::string& text) {
  const ChatDelta whole = parse_whole(o, text);
  for (size_t step : {1, 2, 3, 7}) {
    const ChatDelta d = parse_pieces(o, text, step);
    EXPECT_EQ(d.content, whole.content) << "step " << step << ": " << text;
    EXPECT_EQ(d.reasoning, whole.reasoning) << "step " << step;
    ASSERT_EQ(d.tool_calls.size(), whole.tool_calls.size()) << "step " << step;
    for (size_t i = 0; i < d.tool_calls.size(); ++i) {
      EXPECT_EQ(d.tool_calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(d.tool_calls[i].arguments, whole.tool_calls[i].arguments);
    }
  }
}
}  // namespace

TEST(ToolCallFormat, ChosenFromTheTemplate) {
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n' }}{{ tool_call.name }}"), ToolCallFormat::hermes);
  EXPECT_EQ(detect_tool_call_format("<tool_call>\\n<function=x>\\n<parameter=y>"), ToolCallFormat::none);  // Qwen3-Coder XML
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS][{{ ... }}]"), ToolCallFormat::mistral);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|>assistant{\"name\": f, \"parameters\": x}"), ToolCallFormat::llama3_json);
  EXPECT_EQ(detect_tool_call_format("<|im_start|>{{ message.content }}<|im_end|>"), ToolCallFormat::none);
  EXPECT_TRUE(template_has_thinking("{{ '<think>' }} ... {{ '</think>' }}"));
  EXPECT_FALSE(template_has_thinking("<|im_start|>"));
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));  // Qwen3, enable_thinking false
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n"));
}

TEST(JsonScan, FindsTheEndOfOneValue) {
  EXPECT_EQ(json_container_end(R"({"a": "}"} tail)", 0), 10u);
  EXPECT_EQ(json_container_end(R"({"a": "\"}"} x)", 0), 12u);
  EXPECT_EQ(json_container_end(R"([1, {"b": [2]}] x)", 0), 15u);
  EXPECT_EQ(json_container_end(R"({"a": 1)", 0), std::string_view::npos);
  EXPECT_EQ(json_container_end(R"({"a": 1])", 0), std::string_view::npos);
  EXPECT_EQ(json_container_end("x", 0), std::string_view::npos);
}

TEST(ToolCallParse, Hermes) {
  const auto o = tools(ToolCallFormat::hermes);
  ChatDelta d = parse_whole(o, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"a\": 1}}\n</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city":"Paris","a":1})");  // compact, the model's key order
  EXPECT_EQ(d.tool_calls[0].id, "id_0");
  EXPECT_EQ(d.content, "");
  d = parse_whole(o, "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1]}}</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[1].name, "b");
  EXPECT_EQ(d.tool_calls[1].id, "id_1");
  EXPECT_EQ(d.content, "Let me look.\n");
  // Not well-formed: all of it is content.
  for (const std::string bad : {"<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>",
                                "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"a\"}"}) {
    d = parse_whole(o, bad);
    EXPECT_TRUE(d.tool_calls.empty()) << bad;
    EXPECT_EQ(d.content, bad);
  }
  d = parse_whole(o, "Just text, no calls. <tool_c");
  EXPECT_EQ(d.content, "Just text, no calls. <tool_c");
}

TEST(ToolCallParse, ArgumentsAsAStringOfJson) {
  ChatDelta d = parse_whole(tools(ToolCallFormat::hermes), R"(<tool_call>{"name": "f", "arguments": "{\"k\": 2}"}</tool_call>)");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"k":2})");
}

TEST(ToolCallParse, Llama3Json) {
  const auto o = tools(ToolCallFormat::llama3_json);
  ChatDelta d = parse_whole(o, R"({"name": "get_weather", "parameters": {"city": "Paris"}})");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city":"Paris"})");
  d = parse_whole(o, R"(<|python_tag|>{"name": "f", "parameters": {}})");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  d = parse_whole(o, R"({"not": "a call"})");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, R"({"not": "a call"})");
}

// A bare JSON call after text, at the answer's first '{' and ending the answer, is a call (as
// llama.cpp reads Llama 3.x answers); anywhere else the JSON is text. Every split the same.
TEST(ToolCallParse, Llama3JsonAfterText) {
  const auto o = tools(ToolCallFormat::llama3_json);
  struct Case {
    std::string text, content, call_name, call_args;  // call_name "": no call
  };
  const Case cases[] = {
      {R"(Sure: {"name": "get_weather", "parameters": {"city": "Paris"}})", "Sure: ", "get_weather", R"({"city":"Paris"})"},
      {"I'll check.\n{\"name\": \"f\", \"arguments\": {\"x\": \"}\"}}\n", "I'll check.\n", "f", R"({"x":"}"})"},
      // Text after the call: the JSON was an example in the middle of an answer.
      {R"(Use {"name": "f", "parameters": {}} to call it.)", R"(Use {"name": "f", "parameters": {}} to call it.)", "", ""},
      // Only the first '{' may begin a call.
      {R"(Set {"a": 1} first. {"name": "f", "parameters": {}})", R"(Set {"a": 1} first. {"name": "f", "parameters": {}})", "", ""},
      {R"(Code: f() { return 1; } {"name": "f", "parameters": {}})", R"(Code: f() { return 1; } {"name": "f", "parameters": {}})", "", ""},
      // Cut before the object closed (a length stop): text.
      {R"(Sure: {"name": "f", "parameters": {"a")", R"(Sure: {"name": "f", "parameters": {"a")", "", ""},
      // <|python_tag|> after a first '{' that was text still begins a call.
      {R"({"a": 1} <|python_tag|>{"name": "f", "parameters": {}})", R"({"a": 1} )", "f", "{}"},
  };
  for (const Case& c : cases) {
    for (size_t step : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, c.text.size()}) {
      const ChatDelta d = parse_pieces(o, c.text, step);
      EXPECT_EQ(d.content, c.content) << "step " << step << ": " << c.text;
      ASSERT_EQ(d.tool_calls.size(), c.call_name.empty() ? 0u : 1u) << "step " << step << ": " << c.text;
      if (c.call_name.empty()) continue;
      EXPECT_EQ(d.tool_calls[0].name, c.call_name);
      EXPECT_EQ(d.tool_calls[0].arguments, c.call_args);
    }
  }
}

TEST(ToolCallParse, Llama3JsonStartIsKnownAsSoonAsItCanBe) {
  EXPECT_EQ(llama3_json_start("{"), JsonCallStart::undecided);
  EXPECT_EQ(llama3_json_start("{ \n"), JsonCallStart::undecided);
  EXPECT_EQ(llama3_json_start(R"({"name": "f", "parameters": {"a": 1)"), JsonCallStart::undecided);
  EXPECT_EQ(llama3_json_start(R"({"name": "f", "parameters": {"a": 1}})"), JsonCallStart::call);
  EXPECT_EQ(llama3_json_start(R"({"name": "f", "parameters": {}} and then)"), JsonCallStart::call);
  EXPECT_EQ(llama3_json_start("{ x"), JsonCallStart::not_call);  // a call's first key is a string
  EXPECT_EQ(llama3_json_start("{}"), JsonCallStart::not_call);
  EXPECT_EQ(llama3_json_start(R"({"name": "f", "parameters": [1]})"), JsonCallStart::not_call);
  EXPECT_EQ(llama3_json_start(R"({"city": "Paris"})"), JsonCallStart::not_call);
}

// JSON that is not a call object is streamed once it is known not to be one, not held to the end.
TEST(ToolCallParse, Llama3JsonNotACallIsNotHeld) {
  ChatOutputParser p(tools(ToolCallFormat::llama3_json));
  EXPECT_EQ(p.push("Here is {").content, "Here is ");  // the '{' may begin a call
  EXPECT_EQ(p.push("x").content, "{x");               // a call's first key is a string: not one
  EXPECT_EQ(p.push("} and {\"y\"").content, "} and {\"y\"");  // later braces are text
  ChatOutputParser q(tools(ToolCallFormat::llama3_json));
  EXPECT_EQ(q.push(R"(Data: {"city": "Paris")").content, "Data: ");
  EXPECT_EQ(q.push("} and more").content, R"({"city": "Paris"} and more)");  // closed, no "name"
  EXPECT_TRUE(q.finish().empty());
}

TEST(ToolCallParse, Mistral) {
  const auto o = tools(ToolCallFormat::mistral);
  ChatDelta d = parse_whole(o, R"([TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}, {"name": "g", "arguments": {}}])");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].id, "abcdefghi");  // the model's own id is kept
  EXPECT_EQ(d.tool_calls[1].id, "id_1");
  EXPECT_EQ(d.tool_calls[1].name, "g");
  d = parse_whole(o, R"(Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"b": 2, "a": 40})");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[1].arguments, R"({"b":2,"a":40})");
  EXPECT_EQ(d.content, "Checking.");
  d = parse_whole(o, "[TOOL_CALLS]bad name[ARGS]{}");
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST(ToolCallParse, ParallelFalseKeepsTheFirstCall) {
  auto o = tools(ToolCallFormat::hermes);
  o.parallel_tool_calls = false;
  ChatDelta d = parse_whole(o, R"(<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>)");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "a");
}

TEST(ToolCallParse, NoneParsesNothing) {
  const std::string text = R"(<tool_call>{"name": "a", "arguments": {}}</tool_call>)";
  EXPECT_EQ(parse_whole(ChatOutputOptions{}, text).content, text);
}

TEST(ChatOutput, Thinking) {
  ChatOutputOptions o;
  o.thinking = true;
  ChatDelta d = parse_whole(o, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.");
  EXPECT_EQ(d.reasoning, "Hmm, 2+2.\n");  // the newline after <think> is the block's layout
  EXPECT_EQ(d.content, "It is 4.");
  d = parse_whole(o, "No thinking here.");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "No thinking here.");
  d = parse_whole(o, "<think>never closed");
  EXPECT_EQ(d.reasoning, "never closed");
  EXPECT_EQ(d.content, "");
  o.starts_in_thinking = true;  // the prompt opened <think> (DeepSeek-R1 distills, QwQ)
  d = parse_whole(o, "The user wants 4.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(d.reasoning, "The user wants 4.\n");
  EXPECT_EQ(d.content, "The answer is 4.");
  o.tools = ToolCallFormat::hermes;
  d = parse_whole(o, "Need weather.</think>\n<tool_call>{\"name\": \"w\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(d.reasoning, "Need weather.");
  ASSERT_EQ(d.tool_calls.size(), 1u);
}

// The whitespace after the tags is dropped however the answer is split: before the thinking
// (after <think>, or at the start of a block the prompt opened) and before the content.
TEST(ChatOutput, ThinkingLayoutWhitespaceAnySplit) {
  ChatOutputOptions o;
  o.thinking = true;
  o.tools = ToolCallFormat::hermes;
  struct Case {
    bool starts_in_thinking;
    std::string text, reasoning, content;
    size_t calls;
  };
  const Case cases[] = {
      {false, "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?", "The user greets me.\n", "Hello! How can I help?", 0},
      {false, "<think>\n \n\tA  b\n</think>", "A  b\n", "", 0},
      {false, "<think>\n\n</think>\n\nOnly an answer.", "", "Only an answer.", 0},
      {false, "<think>\nI need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>",
       "I need the weather.\n", "", 1},
      {true, "\n  The user wants 2+2.\n</think>\n\nThe answer is 4.", "The user wants 2+2.\n", "The answer is 4.", 0},
      {true, "\nNever closed.", "Never closed.", "", 0},
  };
  for (const Case& c : cases) {
    o.starts_in_thinking = c.starts_in_thinking;
    for (size_t step : {size_t{1}, size_t{2}, size_t{5}, c.text.size()}) {
      const ChatDelta d = parse_pieces(o, c.text, step);
      EXPECT_EQ(d.reasoning, c.reasoning) << "step " << step << ": " << c.text;
      EXPECT_EQ(d.content, c.content) << "step " << step << ": " << c.text;
      EXPECT_EQ(d.tool_calls.size(), c.calls) << "step " << step << ": " << c.text;
    }
  }
}

TEST(ChatOutput, AnySplitGivesTheSameAnswer) {
  ChatOutputOptions think;
  think.thinking = true;
  think.tools = ToolCallFormat::hermes;
  expect_same_split(think, "<think>\nplan </thi nk> still\n</think>\n\nText <tool <tool_call>{\"name\": \"a\", \"arguments\": {\"s\": \"</tool_call>\"}}</tool_call>");
  expect_same_split(think, "  <thinking is not a tag");
  expect_same_split(tools(ToolCallFormat::llama3_json), "  {\"name\": \"f\", \"parameters\": {\"x\": \"}\"}}");
  expect_same_split(tools(ToolCallFormat::llama3_json), "Plain answer {with braces}.");
  expect_same_split(tools(ToolCallFormat::mistral), "A [TOOL_CALL [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]");
}

TEST(ChatOutput, ForcedCallsAreReadWholeAtTheEnd) {
  ChatOutputOptions o;
  auto r = std::make_shared<ToolRequest>();
  r->tools = {{"add", "", ""}, {"ping", "", ""}};
  r->choice = ToolChoice::required;
  o.forced = r;
  o.call_id_prefix = "c_";
  const std::string out = R"([{"name": "add", "parameters": {"b": 1, "a": 2}}])";
  ChatOutputParser p(o);
  EXPECT_TRUE(p.push(out.substr(0, 10)).empty());  // nothing released before the end
  EXPECT_TRUE(p.push(out.substr(10)).empty());
  ChatDelta d = p.finish();
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "add");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"b":1,"a":2})");
  EXPECT_EQ(d.tool_calls[0].id, "c_0");
  EXPECT_TRUE(p.has_tool_calls());
  ChatOutputParser cut(o);  // cut by max_tokens inside the JSON: content
  cut.push(out.substr(0, 20));
  d = cut.finish();
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, out.substr(0, 20));
  r->choice = ToolChoice::named;
  r->named = "ping";
  ChatOutputParser named(o);
  named.push(R"({"host": "x"})");
  d = named.finish();
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "ping");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"host":"x"})");
}
