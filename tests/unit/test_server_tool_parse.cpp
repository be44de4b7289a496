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
// An answer as a client assembles it: content and thinking concatenated, calls by index.
struct Answer {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;
  size_t argument_pieces = 0;  // deltas that carried arguments bytes
  size_t pieces_before_end = 0;  // of those, released by push() (before finish())
  void add(const ChatDelta& d, bool from_push) {
    reasoning += d.reasoning;
    content += d.content;
    apply_tool_call_deltas(tool_calls, d.tool_calls);
    for (const ToolCallDelta& t : d.tool_calls)
      if (!t.arguments.empty()) {
        ++argument_pieces;
        pieces_before_end += from_push;
      }
  }
};

// The whole text in one push, not streamed (a non-streaming answer).
Answer parse_whole(const ChatOutputOptions& o, const std::string& text) {
  ChatOutputParser p(o);
  Answer a;
  a.add(p.push(text), true);
  a.add(p.finish(), false);
  return a;
}

// The same text pushed `step` bytes at a time, streamed (tool-call deltas as they come); every
// delta assembled.
Answer parse_pieces(ChatOutputOptions o, const std::string& text, size_t step) {
  o.stream = true;
  ChatOutputParser p(o);
  Answer a;
  for (size_t i = 0; i < text.size(); i += step) a.add(p.push(std::string_view(text).substr(i, step)), true);
  a.add(p.finish(), false);
  return a;
}

ChatOutputOptions tools(ToolCallFormat f) {
  ChatOutputOptions o;
  o.tools = f;
  o.call_id_prefix = "id_";
  return o;
}

void expect_same_split(const ChatOutputOptions& o, const std::string& text) {
  const Answer whole = parse_whole(o, text);
  for (size_t step : {1, 2, 3, 7}) {
    const Answer d = parse_pieces(o, text, step);
    EXPECT_EQ(d.content, whole.content) << "step " << step << ": " << text;
    EXPECT_EQ(d.reasoning, whole.reasoning) << "step " << step;
    ASSERT_EQ(d.tool_calls.size(), whole.tool_calls.size()) << "step " << step;
    for (size_t i = 0; i < d.tool_calls.size(); ++i) {
      EXPECT_EQ(d.tool_calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(d.tool_calls[i].arguments, whole.tool_calls[i].arguments);
      EXPECT_EQ(d.tool_calls[i].id, whole.tool_calls[i].id);
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
  Answer d = parse_whole(o, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"a\": 1}}\n</tool_call>");
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
  Answer d = parse_whole(tools(ToolCallFormat::hermes), R"(<tool_call>{"name": "f", "arguments": "{\"k\": 2}"}</tool_call>)");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"k":2})");
}

TEST(ToolCallParse, Llama3Json) {
  const auto o = tools(ToolCallFormat::llama3_json);
  Answer d = parse_whole(o, R"({"name": "get_weather", "parameters": {"city": "Paris"}})");
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
      const Answer d = parse_pieces(o, c.text, step);
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
  Answer d = parse_whole(o, R"([TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}, {"name": "g", "arguments": {}}])");
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
  Answer d = parse_whole(o, R"(<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>)");
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
  Answer d = parse_whole(o, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.");
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
      const Answer d = parse_pieces(o, c.text, step);
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

TEST(JsonScan, ScannerAndMinify) {
  EXPECT_EQ(minify_json(R"( { "a" : [1, 2.50 , "x y\"} "], "b": {"c": null, "d": true}, "e": "\u00e9" } )"),
            R"({"a":[1,2.50,"x y\"} "],"b":{"c":null,"d":true},"e":"\u00e9"})");  // the model's own spelling
  for (const std::string bad : {"{\"a\": <", "{\"a\" 1", "{\"a\": tru3", "[1}", "{1: 2}", "{\"a\": \"\\x\"}", "{\"a\": \"\n\"}"}) {
    JsonScanner scan;
    bool error = false;
    for (char c : bad) error = error || scan.feed(c) == JsonScanner::Byte::error;
    EXPECT_TRUE(error) << bad;
  }
  JsonScanner scan;
  for (char c : std::string(R"({"k": [1, {"x": "}"}]} )")) EXPECT_NE(scan.feed(c), JsonScanner::Byte::error);
  EXPECT_TRUE(scan.complete());
  EXPECT_EQ(scan.feed('x'), JsonScanner::Byte::after_end);
  const auto m = json_object_members(R"({"name": "f", "arguments": {"a": [1, "]"]}, "id": 7})");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].first, "arguments");
  EXPECT_EQ(m[1].second, R"({"a": [1, "]"]})");
  EXPECT_EQ(m[2].second, "7");
}

// Streamed, a call's head goes out once its name and its arguments' first value are known, then the
// arguments byte by byte as they come (only the wrapper's bytes held back), the pieces summing to
// the non-streamed arguments; a Mistral Nemo array item goes out whole when it is complete (its id
// follows the arguments).
TEST(ChatOutput, ArgumentsStreamAsTheyAreGenerated) {
  struct Case {
    ToolCallFormat f;
    std::string text;
    std::string head_after;  // the head goes out with the byte that ends this prefix
    std::string name, args;
  };
  const Case cases[] = {
      {ToolCallFormat::hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2]}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"", "get_weather", R"({"city":"Paris","n":[1,2]})"},
      {ToolCallFormat::llama3_json, "{\"name\": \"f\", \"parameters\": {\"a\": 1, \"b\": \"x\"}}", "{\"name\": \"f\", \"parameters\": {\"a\": 1",
       "f", R"({"a":1,"b":"x"})"},
      {ToolCallFormat::mistral, "[TOOL_CALLS]add[ARGS]{\"b\": 2, \"a\": 40}", "[TOOL_CALLS]add[ARGS]{\"b\": 2", "add", R"({"b":2,"a":40})"},
      {ToolCallFormat::hermes, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"f\", \"arguments\": {}", "f", "{}"},
      {ToolCallFormat::mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]",
       "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]", "f", R"({"a":1})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    ChatOutputOptions o = tools(c.f);
    o.stream = true;
    ChatOutputParser p(o);
    std::vector<ParsedToolCall> calls;
    std::string at_head;
    size_t pieces = 0;
    for (size_t i = 0; i < c.text.size(); ++i) {
      const ChatDelta d = p.push(c.text.substr(i, 1));
      EXPECT_EQ(d.content, "");
      for (const ToolCallDelta& t : d.tool_calls) {
        if (t.head) at_head = c.text.substr(0, i + 1);
        pieces += !t.arguments.empty();
      }
      apply_tool_call_deltas(calls, d.tool_calls);
      if (i + 1 < c.text.size() && !calls.empty()) EXPECT_EQ(c.args.rfind(calls[0].arguments, 0), 0u) << "not a prefix: " << calls[0].arguments;
    }
    const ChatDelta end = p.finish();
    EXPECT_TRUE(end.empty()) << "all of it went out while it was generated";
    EXPECT_EQ(at_head, c.head_after);
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].name, c.name);
    EXPECT_EQ(calls[0].arguments, c.args);
    EXPECT_EQ(calls[0].arguments, parse_whole(tools(c.f), c.text).tool_calls.at(0).arguments);
    if (c.args.size() > 2 && c.text.find("[TOOL_CALLS][") == std::string::npos) EXPECT_GT(pieces, 1u);
    EXPECT_TRUE(p.has_tool_calls());
  }
}

// A call that breaks after its head went out: streamed, the call keeps what was sent and the text
// from where it broke is content (the non-streamed answer keeps the whole block as content); cut by
// a length stop, the call keeps what was sent. Before the head, every answer keeps the block whole.
TEST(ChatOutput, StreamedCallThatBreaks) {
  const auto o = tools(ToolCallFormat::hermes);
  const std::string broken = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1, oops}}</tool_call>";
  for (size_t step : {1, 4, 100}) {
    const Answer s = parse_pieces(o, broken, step);
    ASSERT_EQ(s.tool_calls.size(), 1u);
    EXPECT_EQ(s.tool_calls[0].arguments, R"({"a":1,)");
    EXPECT_EQ(s.content, "oops}}</tool_call>");
    const Answer cut = parse_pieces(o, "Hm. <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"lon", step);
    ASSERT_EQ(cut.tool_calls.size(), 1u);
    EXPECT_EQ(cut.tool_calls[0].arguments, R"({"a":"lon)");
    EXPECT_EQ(cut.content, "Hm. ");
    // A second call cut before its head: its text is content.
    const std::string second = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>\n<tool_call>{\"name\": \"g\"";
    const Answer two = parse_pieces(o, second, step);
    ASSERT_EQ(two.tool_calls.size(), 1u);
    EXPECT_EQ(two.content, "<tool_call>{\"name\": \"g\"");
  }
  const Answer whole = parse_whole(o, broken);
  EXPECT_TRUE(whole.tool_calls.empty());
  EXPECT_EQ(whole.content, broken);
}

// parallel_tool_calls false: call_complete() as soon as the first call and its wrapper are whole
// (Completion stops the generation there), and the answer is that call, even when what followed
// was cut (Mistral's array never closed).
TEST(ChatOutput, ParallelFalseFirstCallComplete) {
  struct Case {
    ToolCallFormat f;
    std::string first, rest;
  };
  const Case cases[] = {
      {ToolCallFormat::hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>", "\n<tool_call>\n{\"name\": \"b\""},
      {ToolCallFormat::mistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"x\": 1}},", " {\"name\": \"b\", \"argu"},
      {ToolCallFormat::mistral, "[TOOL_CALLS]a[ARGS]{\"x\": 1}", "[TOOL_CALLS]b[AR"},
      {ToolCallFormat::llama3_json, "{\"name\": \"a\", \"parameters\": {\"x\": 1}}", "; {\"name\": \"b\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.first);
    for (bool stream : {false, true}) {
      ChatOutputOptions o = tools(c.f);
      o.parallel_tool_calls = false;
      o.stream = stream;
      ChatOutputParser p(o);
      Answer a;
      for (size_t i = 0; i < c.first.size(); ++i) {
        EXPECT_FALSE(p.call_complete());
        a.add(p.push(c.first.substr(i, 1)), true);
      }
      EXPECT_TRUE(p.call_complete());
      a.add(p.push(c.rest), true);  // what a stop at the next step would not have let come
      a.add(p.finish(), false);
      ASSERT_EQ(a.tool_calls.size(), 1u);
      EXPECT_EQ(a.tool_calls[0].name, "a");
      EXPECT_EQ(a.tool_calls[0].arguments, R"({"x":1})");
      EXPECT_EQ(a.content, "");
    }
  }
  // A Llama 3 call after text is only a call if it ends the answer: no early completion.
  ChatOutputOptions o = tools(ToolCallFormat::llama3_json);
  o.parallel_tool_calls = false;
  ChatOutputParser p(o);
  p.push(R"(Sure: {"name": "a", "parameters": {}})");
  EXPECT_FALSE(p.call_complete());
}

// tool_choice required / named stream like auto calls: the head once the name (the named function's
// at once) and the arguments' first value are known, then the arguments as the grammar lets the
// model write them; the same calls as the non-streamed answer.
TEST(ChatOutput, ForcedCallsStreamToo) {
  auto r = std::make_shared<ToolRequest>();
  r->tools = {{"add", "", ""}, {"ping", "", ""}};
  struct Case {
    ToolChoice choice;
    std::string text, head_after, name, args;
  };
  const Case cases[] = {
      {ToolChoice::required, R"([{"name": "add", "parameters": {"b": 1, "a": 2}}, {"name": "ping", "parameters": {}}])",
       R"([{"name": "add", "parameters": {"b": 1)", "add", R"({"b":1,"a":2})"},
      {ToolChoice::named, "  {\"host\": \"x\", \"n\": 3}", "  {\"host\": \"", "ping", R"({"host":"x","n":3})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    r->choice = c.choice;
    r->named = "ping";
    ChatOutputOptions o;
    o.forced = r;
    o.call_id_prefix = "c_";
    o.stream = true;
    ChatOutputParser p(o);
    Answer a;
    std::string at_head;
    for (size_t i = 0; i < c.text.size(); ++i) {
      const ChatDelta d = p.push(c.text.substr(i, 1));
      for (const ToolCallDelta& t : d.tool_calls)
        if (t.head && t.index == 0) at_head = c.text.substr(0, i + 1);
      a.add(d, true);
    }
    a.add(p.finish(), false);
    EXPECT_EQ(at_head, c.head_after);
    EXPECT_GT(a.pieces_before_end, 2u);
    EXPECT_EQ(a.pieces_before_end, a.argument_pieces);
    ASSERT_FALSE(a.tool_calls.empty());
    EXPECT_EQ(a.tool_calls[0].name, c.name);
    EXPECT_EQ(a.tool_calls[0].arguments, c.args);
    EXPECT_EQ(a.tool_calls[0].id, "c_0");
    o.stream = false;
    const Answer whole = parse_whole(o, c.text);
    ASSERT_EQ(whole.tool_calls.size(), a.tool_calls.size());
    for (size_t i = 0; i < a.tool_calls.size(); ++i) {
      EXPECT_EQ(whole.tool_calls[i].name, a.tool_calls[i].name);
      EXPECT_EQ(whole.tool_calls[i].arguments, a.tool_calls[i].arguments);
      EXPECT_EQ(whole.tool_calls[i].id, a.tool_calls[i].id);
    }
  }
  // Cut by max_tokens inside the arguments: streamed, the call keeps what was sent; not streamed,
  // the output is content (docs/serving.md).
  r->choice = ToolChoice::named;
  ChatOutputOptions o;
  o.forced = r;
  o.stream = true;
  const Answer cut = parse_pieces(o, R"({"host": "exa)", 1);
  ASSERT_EQ(cut.tool_calls.size(), 1u);
  EXPECT_EQ(cut.tool_calls[0].arguments, R"({"host":"exa)");
  EXPECT_EQ(cut.content, "");
  o.stream = false;
  EXPECT_EQ(parse_whole(o, R"({"host": "exa)").content, R"({"host": "exa)");
}
