// Chat prompt formats (the text before tokenization; BOS comes from the tokenizer's add_bos):
// ChatML:
//   "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then "<|im_start|>assistant\n" when a
//   generation prompt is wanted. When the first of one or more messages is not a system message and the model's
//   chat template has a default system prompt, that prompt is inserted first as a system message.
// Gemma (as llama.cpp's built-in "gemma" template):
//   "<start_of_turn>{role}\n{content}<end_of_turn>\n" per message, role "assistant" written "model",
//   content trimmed of surrounding whitespace; Gemma has no system role, so system messages are
//   trimmed, joined and put at the start of the next non-model turn, followed by a blank line;
//   then "<start_of_turn>model\n" when a generation prompt is wanted.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mpkv {

enum class ChatFormat { chatml, gemma };

// gemma when the template uses "<start_of_turn>", or when there is no template and the vocabulary
// has a "<start_of_turn>" token (base Gemma GGUFs ship without a template); chatml otherwise.
ChatFormat detect_chat_format(const std::string& chat_template, bool vocab_has_start_of_turn);

// One call an assistant message makes (rendered by a Jinja chat template, chat_template.h).
struct ChatToolCall {
  std::string id;         // "" when the client gave none
  std::string name;
  std::string arguments;  // JSON text, as OpenAI sends it
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role, std::string content) : role(std::move(role)), content(std::move(content)) {}

  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  // Read only by a Jinja chat template (chat_template.h); the built-in formats below ignore them.
  std::vector<ChatToolCall> tool_calls;  // assistant
  std::string tool_call_id;              // tool: the call this result answers
  std::string name;                      // tool: the function's name
  std::string reasoning_content;         // assistant: its thinking, for templates that replay it
};

// The default system prompt of a ChatML Jinja template: the literal text between
// "<|im_start|>system\n" (a real newline or the two characters "\n") and "<|im_end|>" inside one
// template string, e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face".
// Occurrences whose text holds template syntax or quotes (the system message's own content) are
// skipped. nullopt when the template has none.
std::optional<std::string> chatml_default_system_prompt(const std::string& chat_template);

std::string format_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::optional<std::string>& default_system_prompt);

std::string format_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

}  // namespace mpkv
