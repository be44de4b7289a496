// ChatML formatting and default-system-prompt extraction; expected strings written by hand.
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

}  // namespace
}  // namespace mpkv
