// The Jinja chat-template path (tokenizer/chat_template.h, docs/chat_templates.md) against prompts
// written by hand from the templates' documented formats, the inputs llama.cpp's server gives a
// template, and the errors a bad template or bad input gets. No golden file is involved here:
// tests/golden/test_tokenizer_template_golden.cpp compares with llama.cpp's own output when it exists.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

constexpr std::time_t kJul26 = 1722000000;  // 2024-07-26 13:20 UTC

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MPKV_JINJA_TEMPLATES) + "/" + name, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TZ", "UTC", 1);  // datetime, date_string and strftime_now are local time
    tzset();
  }
  static ChatTemplateInputs two_messages() {
    ChatTemplateInputs in;
    in.messages = {{"system", "You are terse."}, {"user", "Hi"}};
    in.now = kJul26;
    return in;
  }
};

TEST_F(ChatTemplateTest, Llama32HeadersByHand) {
  const std::string src = read_template("meta-llama-Llama-3.2-3B-Instruct.jinja");
  if (src.empty()) GTEST_SKIP() << "templates absent: run scripts/get_jinja.sh";
  // Llama 3's format: BOS, then per message <|start_header_id|>role<|end_header_id|>\n\n content
  // <|eot_id|>; the system turn carries the knowledge cutoff and today's date. The tokenizer adds
  // BOS itself (add_bos), so the template's leading <|begin_of_text|> is cut.
  const ChatTemplate t(src, "<|begin_of_text|>", "<|eot_id|>", /*add_bos=*/true);
  EXPECT_EQ(t.apply(two_messages()),
            "<|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
            "You are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  const ChatTemplate keeps_bos(src, "<|begin_of_text|>", "<|eot_id|>", /*add_bos=*/false);
  EXPECT_EQ(keeps_bos.apply(two_messages()).rfind("<|begin_of_text|><|start_header_id|>system", 0), 0u);
}

TEST_F(ChatTemplateTest, Qwen3EnableThinkingFromKwargs) {
  const std::string src = read_template("Qwen-Qwen3-0.6B.jinja");
  if (src.empty()) GTEST_SKIP() << "templates absent: run scripts/get_jinja.sh";
  const ChatTemplate t(src, "", "<|im_end|>", false);
  ChatTemplateInputs in;
  in.messages = {{"user", "Hi"}};
  // Qwen3's documented switch: enable_thinking=false pre-fills an empty think block.
  EXPECT_EQ(t.apply(in), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  in.kwargs = {{"enable_thinking", "false"}};
  EXPECT_EQ(t.apply(in), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  in.add_generation_prompt = false;
  EXPECT_EQ(t.apply(in), "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_F(ChatTemplateTest, ServerInputsReachTheTemplate) {
  const ChatTemplate t(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt is defined }}|{{ enable_thinking }}|"
      // Python Jinja prints booleans as True / False.
      "{{ date_string }}|{{ datetime }}|{{ strftime_now('%Y-%m-%d') }}|{{ tools is defined }}|{{ custom.a | tojson }}|"
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}",
      "<s>", "</s>", false);
  ChatTemplateInputs in;
  // "developer" becomes "system"; the engine's probe (jinja::caps_get) finds no system role in this
  // template, so, as llama.cpp does, the system message is put before the next one's content.
  in.messages = {{"developer", "rules"}, {"user", "q"}};
  in.now = kJul26;
  in.kwargs = {{"custom", "{\"a\": [1, 2]}"}};
  EXPECT_EQ(t.apply(in), "<s>|</s>|True|True|26 Jul 2024|Jul 26 2024|2024-07-26|False|[1, 2]|user:rules\nq;");
  in.add_generation_prompt = false;
  in.kwargs = {{"enable_thinking", "false"}, {"date_string", "\"1 Jan 2000\""}, {"custom", "{\"a\": 3}"}};
  in.tools = {{"get_weather", "Weather now", ""}};
  EXPECT_EQ(t.apply(in), "<s>|</s>|False|False|1 Jan 2000|Jul 26 2024|2024-07-26|True|3|user:rules\nq;");
}

TEST_F(ChatTemplateTest, ToolCallsAndResults) {
  const ChatTemplate t(
      "{% for m in messages %}{{ m.role }}"
      "{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.id }} {{ c.function.name }} {{ c.function.arguments }}]{% endfor %}{% endif %}"
      "{% if m.role == 'tool' %}({{ m.tool_call_id }}={{ m.content }}){% endif %};{% endfor %}"
      "{% for tool in tools %}{{ tool.function.name }}:{{ tool.function.parameters | tojson }}{% endfor %}",
      "", "", false);
  ChatTemplateInputs in;
  ChatMessage call("assistant", "");
  call.tool_calls = {{"call_1", "get_weather", "{\"city\":\"Paris\"}"}};
  ChatMessage result("tool", "sunny");
  result.tool_call_id = "call_1";
  result.name = "get_weather";
  in.messages = {{"user", "Weather?"}, call, result};
  in.tools = {{"get_weather", "", "{\"type\":\"object\"}"}};
  EXPECT_EQ(t.apply(in), "user;assistant[call_1 get_weather {\"city\":\"Paris\"}];tool(call_1=sunny);"
                         "get_weather:{\"type\": \"object\"}");
}

TEST_F(ChatTemplateTest, BadTemplatesAndInputsAreErrors) {
  EXPECT_THROW(ChatTemplate("{% for m in messages %}", "", "", false), Error);  // no endfor
  EXPECT_THROW(ChatTemplate("{{ 'a' + }}", "", "", false), Error);
  const ChatTemplate raises("{{ raise_exception('Conversation roles must alternate') }}", "", "", false);
  try {
    raises.apply({});
    FAIL() << "raise_exception did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
  }
  const ChatTemplate ok("{{ x }}", "", "", false);
  ChatTemplateInputs in;
  in.kwargs = {{"x", "not json"}};
  EXPECT_THROW(ok.apply(in), Error);
  in.kwargs.clear();
  in.tools = {{"f", "", "{bad"}};
  EXPECT_THROW(ok.apply(in), Error);
}

// A Tokenizer without a template keeps the built-in formats and refuses what only a template reads;
// one whose template does not parse still loads and says why at format_chat.
TEST(ChatTemplateTokenizer, WithoutOrWithBrokenTemplate) {
  const std::vector<std::string> tokens = {"a", "<|im_start|>", "<|im_end|>"};
  const std::vector<TokenType> types = {TokenType::normal, TokenType::control, TokenType::control};
  const Tokenizer plain(tokens, types, {}, "smollm", {1, 2, -1, -1}, false, "");
  EXPECT_FALSE(plain.has_chat_template());
  EXPECT_EQ(plain.format_chat({{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ChatTemplateInputs in;
  in.messages = {{"user", "Hi"}};
  in.kwargs = {{"enable_thinking", "false"}};
  EXPECT_THROW(plain.format_chat(in), Error);
  const Tokenizer broken(tokens, types, {}, "smollm", {1, 2, -1, -1}, false, "{% if %}");
  EXPECT_TRUE(broken.has_chat_template());
  EXPECT_THROW(broken.format_chat({{"user", "Hi"}}, true), Error);
  const Tokenizer templated(tokens, types, {}, "smollm", {1, 2, -1, -1}, false,
                            "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ bos_token }}");
  EXPECT_EQ(templated.format_chat(in), "[user]Hi<|im_start|>");  // kwargs need no variable to be read
}

// SmolLM2's own template (from its GGUF) rendered by the engine is byte-identical to the built-in
// ChatML writer mpkv used before templates were rendered (format_chatml with the default system
// prompt it extracts), over several conversations.
TEST(ChatTemplateSmolLM2, SameBytesAsBuiltInChatML) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "default model absent (set MPKV_MODEL or put it under models/)";
  GgufReader g(path);
  const Tokenizer tok = Tokenizer::from_gguf(g);
  ASSERT_TRUE(tok.has_chat_template());
  const auto sys = tok.default_system_prompt();
  ASSERT_TRUE(sys.has_value());
  const std::vector<std::vector<ChatMessage>> convs = {
      {{"user", "Hi"}},
      {{"system", "Be brief."}, {"user", "What is 2+2?"}},
      {{"user", "Hi"}, {"assistant", "Hello! How can I help?"}, {"user", "Tell me a joke.\nA short one."}},
      {{"system", "S"}, {"user", "u1"}, {"assistant", "a1"}, {"user", "u2"}},
      {{"user", "  spaces kept  "}},
  };
  for (const auto& c : convs)
    for (bool gen : {true, false}) EXPECT_EQ(tok.format_chat(c, gen), format_chatml(c, gen, sys)) << c.back().content;
  // The hand-written form of the first one.
  EXPECT_EQ(tok.format_chat(convs[1], true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace mpkv
