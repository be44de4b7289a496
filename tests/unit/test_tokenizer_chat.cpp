// ChatML and Gemma formatting, format detection and default-system-prompt extraction; expected
// strings written by hand.
#include <gtest/gtest.h>

#include "tokenizer/chat_format.h"

namespace mpkv {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim.
const char* const kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

TEST(TokenizerChat, ExtractsSmolLm2DefaultSystemPrompt) {
  EXPECT_EQ(chatml_default_system_prompt(kSmolLm2Template),
            std::optional<std::string>("You are a helpful AI assistant named SmolLM, trained by Hugging Face"));
}

TEST(TokenizerChat, TemplateWithoutDefaultHasNone) {
  const std::string plain =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}";
  EXPECT_EQ(chatml_default_system_prompt(plain), std::nullopt);
  EXPECT_EQ(chatml_default_system_prompt(""), std::nullopt);
  // Qwen2-style: the first "<|im_start|>system\n" is followed by the message's own content; the
  // default is the second one, written with a Jinja "\n" escape.
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}";
  EXPECT_EQ(chatml_default_system_prompt(qwen), std::optional<std::string>("You are Qwen."));
}

TEST(TokenizerChat, OneUserMessageGetsDefaultSystem) {
  const auto sys = chatml_default_system_prompt(kSmolLm2Template);
  EXPECT_EQ(format_chatml({{"user", "What is 2+2?"}}, true, sys),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(TokenizerChat, ExplicitSystemMessageReplacesDefault) {
  const auto sys = chatml_default_system_prompt(kSmolLm2Template);
  EXPECT_EQ(format_chatml({{"system", "Be brief."}, {"user", "Hi"}}, false, sys),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(TokenizerChat, NoDefaultMeansNoSystemMessage) {
  EXPECT_EQ(format_chatml({{"user", "Hi"}}, true, std::nullopt),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(format_chatml({}, true, std::string("ignored")), "<|im_start|>assistant\n");
}

TEST(TokenizerChat, GemmaTurns) {
  EXPECT_EQ(format_gemma({{"user", "What is 2+2?"}}, true),
            "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n");
  // assistant is written "model"; contents are trimmed; no generation prompt when not asked.
  EXPECT_EQ(format_gemma({{"user", "  Hi \n"}, {"assistant", "Hello."}, {"user", "Bye"}}, false),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n");
}

TEST(TokenizerChat, GemmaPutsSystemTextIntoTheNextUserTurn) {
  EXPECT_EQ(format_gemma({{"system", " Be brief. "}, {"user", "Hi"}}, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  // A model turn does not take it; the next user turn does.
  EXPECT_EQ(format_gemma({{"system", "S"}, {"assistant", "A"}, {"user", "U"}}, false),
            "<start_of_turn>model\nA<end_of_turn>\n<start_of_turn>user\nS\n\nU<end_of_turn>\n");
  EXPECT_EQ(format_gemma({}, true), "<start_of_turn>model\n");
}

TEST(TokenizerChat, DetectsTheFormat) {
  EXPECT_EQ(detect_chat_format(kSmolLm2Template, false), ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format("{{ '<start_of_turn>' + role + '\n' }}", false), ChatFormat::gemma);
  EXPECT_EQ(detect_chat_format("", true), ChatFormat::gemma);   // base Gemma: no template
  EXPECT_EQ(detect_chat_format("", false), ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format(kSmolLm2Template, true), ChatFormat::chatml);  // the template decides
}

}  // namespace
}  // namespace mpkv
