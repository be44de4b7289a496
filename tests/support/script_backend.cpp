#include "support/script_backend.h"

namespace mpkv::server {

ScriptBackend::ScriptBackend(std::string template_source, int n_ctx, int max_queue, bool immediate)
    : EchoBackend(n_ctx, max_queue, immediate), source_(std::move(template_source)) {
  if (!source_.empty()) template_ = std::make_unique<ChatTemplate>(source_, "<s>", "</s>", /*add_bos=*/false);
}

Backend::ChatPrompt ScriptBackend::chat_prompt(const ChatTemplateInputs& in) const {
  ChatPrompt p = EchoBackend::chat_prompt(in);
  if (template_) p.text = template_->apply(in);  // throws Error as a model's template would
  {
    std::lock_guard lock(mu_);
    last_prompt_ = p.text;
  }
  std::string reply;
  if (!in.messages.empty() && in.messages.back().role == "tool") {
    reply = "The tool said: " + in.messages.back().content;
  } else {
    for (const ChatMessage& m : in.messages)
      if (m.role == "user") reply = m.content;
  }
  if (reply.empty()) reply = "?";
  p.tokens = encode_prompt(reply);
  p.tokens.push_back(kEchoEnd);  // generated last: the answer stops as at end of generation
  return p;
}

std::string ScriptBackend::last_prompt() const {
  std::lock_guard lock(mu_);
  return last_prompt_;
}

}  // namespace mpkv::server
