#include "server/engine_backend.h"

namespace mpkv::server {

std::vector<int32_t> EngineBackend::encode_chat(const std::vector<ChatMessage>& messages,
                                                const std::vector<std::pair<std::string, std::string>>& kwargs) const {
  const Tokenizer& tok = engine_.tokenizer();
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = true;
  in.kwargs = kwargs;
  return tok.encode(tok.format_chat(in), tok.add_bos(), /*parse_special=*/true);
}

std::vector<int32_t> EngineBackend::encode_prompt(const std::string& text, bool add_special) const {
  const Tokenizer& tok = engine_.tokenizer();
  return tok.encode(text, add_special && tok.add_bos(), /*parse_special=*/false);
}

std::string EngineBackend::token_text(int32_t id) const { return engine_.tokenizer().token_piece(id); }

uint64_t EngineBackend::add_request(RequestParams params, OutputCallback on_output) {
  return engine_.add_request(std::move(params), std::move(on_output));
}

EngineMetrics EngineBackend::metrics() const {
  EngineMetrics m = engine_.metrics();
  std::lock_guard lock(grammar_mu_);
  if (grammar_) m.grammar_compile = grammar_->stats();
  return m;
}

std::shared_ptr<const CompiledConstraint> EngineBackend::compile_constraint(const Constraint& c) {
  GrammarCompiler* g = nullptr;
  {
    std::lock_guard lock(grammar_mu_);
    if (!grammar_) grammar_ = std::make_unique<GrammarCompiler>(engine_.tokenizer(), engine_.n_logits(), grammar_opts_);
    g = grammar_.get();
  }
  return g->compile(c);  // outside the lock: compiles of other constraints go on meanwhile
}

}  // namespace mpkv::server
