// Backend over a running Engine: chat prompts through Tokenizer::format_chat (the model's own chat
// format: ChatML for SmolLM2/Qwen, turns for Gemma; special tokens parsed, as `mpkv generate --chat`),
// completions encode the raw text.
#pragma once
#include "server/backend.h"

namespace mpkv::server {

class EngineBackend : public Backend {
 public:
  explicit EngineBackend(Engine& engine) : engine_(engine) {}
  std::vector<int32_t> encode_chat(const std::vector<ChatMessage>& messages) const override;
  std::vector<int32_t> encode_prompt(const std::string& text) const override;
  std::string token_text(int32_t id) const override;
  int n_ctx() const override { return engine_.options().n_ctx; }
  uint64_t add_request(RequestParams params, OutputCallback on_output) override;
  void abort(uint64_t id) override { engine_.abort(id); }
  EngineMetrics metrics() const override { return engine_.metrics(); }

 private:
  Engine& engine_;
};

}  // namespace mpkv::server
