#include "server/engine_backend.h"

namespace mpkv::server {

Backend::ChatPrompt EngineBackend::chat_prompt(const ChatTemplateInputs& inputs) const {
  const Tokenizer& tok = engine_.tokenizer();
  ChatPrompt p;
  p.text = tok.format_chat(inputs);
  p.tokens = tok.encode(p.text, tok.add_bos(), /*parse_special=*/true);
  return p;
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
