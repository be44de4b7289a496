// An EchoBackend whose "model" says what the test scripts (tests and the e2e fake server): the chat
// prompt is rendered by a real chat template (ChatTemplate, when one is given) so tools and tool
// messages go through the same rendering as a model's, but the tokens handed to the engine are the
// bytes of the reply, which EchoBackend then generates back one per step:
//   - after a tool message: "The tool said: <its content>";
//   - otherwise: the last user message's content, verbatim (so a test makes the model emit any
//     output, tool-call markup included).
// chat_template_source() is the template's, so the server picks its tool-call and thinking parsers
// from it as from a real model's.
#pragma once
#include <memory>
#include <string>

#include "support/echo_backend.h"
#include "tokenizer/chat_template.h"

namespace mpkv::server {

// A small ChatML template that lists the tools, writes an assistant's calls in <tool_call> blocks
// and mentions <think> ... </think>: the server reads Hermes calls and thinking for it (the fuzzer's
// tool handler; tests/unit/test_server_tools_handler.cpp checks that it renders).
inline constexpr const char* kSmallToolTemplate =
    "{%- if tools %}{{- '<|im_start|>system\\n<tools>' }}{%- for t in tools %}{{- t | tojson }}{%- endfor %}"
    "{{- '</tools> <think></think><|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content }}"
    "{%- if m.tool_calls %}{%- for c in m.tool_calls %}{{- '<tool_call>' + c.function.name }}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

class ScriptBackend : public EchoBackend {
 public:
  // template_source "": no template (the prompt text is EchoBackend's).
  ScriptBackend(std::string template_source, int n_ctx, int max_queue, bool immediate = false);
  ChatPrompt chat_prompt(const ChatTemplateInputs& inputs) const override;
  std::string chat_template_source() const override { return source_; }
  // The text the last chat_prompt rendered (what the template made of the request).
  std::string last_prompt() const;

 private:
  std::string source_;
  std::unique_ptr<ChatTemplate> template_;
  mutable std::mutex mu_;
  mutable std::string last_prompt_;
};

}  // namespace mpkv::server
