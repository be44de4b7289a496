// ChatML prompt formatting:
//   "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then "<|im_start|>assistant\n" when a
//   generation prompt is wanted. When the first of one or more messages is not a system message and the model's
//   chat template has a default system prompt, that prompt is inserted first as a system message.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace mpkv {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The default system prompt of a ChatML Jinja template: the literal text between
// "<|im_start|>system\n" (a real newline or the two characters "\n") and "<|im_end|>" inside one
// template string, e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face".
// Occurrences whose text holds template syntax or quotes (the system message's own content) are
// skipped. nullopt when the template has none.
std::optional<std::string> chatml_default_system_prompt(const std::string& chat_template);

std::string format_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::optional<std::string>& default_system_prompt);

}  // namespace mpkv
