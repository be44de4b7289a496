// A model's own chat template (the GGUF's tokenizer.chat_template, Jinja) rendered by llama.cpp's
// Jinja engine (mpkv_jinja, fetched by scripts/get_jinja.sh), with the inputs llama.cpp's server
// gives it (docs/chat_templates.md, "What the template sees"): messages in OpenAI's JSON shape,
// bos_token / eos_token, add_generation_prompt (defined only when true), enable_thinking, tools,
// datetime / date_string, and chat_template_kwargs laid over them; strftime_now and raise_exception
// are the engine's own. The template's BOS (EOS) is cut from the start (end) of the text when the
// tokenizer adds it itself, as llama.cpp does, so it is not doubled.
#pragma once
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_format.h"

namespace mpkv {

// A tool the model may call, as OpenAI's {"type": "function", "function": {...}}.
struct ChatTool {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema text; "" is {"type": "object", "properties": {}}
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  std::vector<ChatTool> tools;  // none: `tools` is left undefined
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // llama-server's default; a chat_template_kwargs entry overrides it
  // chat_template_kwargs: top-level template variables, name -> JSON text (llama-server's shape).
  std::vector<std::pair<std::string, std::string>> kwargs;
  std::optional<std::time_t> now;  // strftime_now, datetime, date_string (local time); unset: now
};

class ChatTemplate {
 public:
  // Parses the template. bos_token / eos_token: the vocabulary's BOS / EOS text ("" when none);
  // add_bos / add_eos: whether the tokenizer adds them (then a rendered one is cut). Throws Error
  // when the source does not lex or parse.
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, bool add_bos,
               bool add_eos = false);

  // The prompt text. Throws Error when the template raises (raise_exception) or fails while
  // rendering, when a tool call's arguments or a tool's parameters are not JSON, or when a
  // chat_template_kwargs value is not JSON.
  std::string apply(const ChatTemplateInputs& inputs) const;

  const std::string& source() const;
  // What the engine's probe found the template to support (jinja::caps_get).
  bool supports_system_role() const;
  bool supports_tools() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace mpkv
