// Backend over a running Engine: chat prompts through Tokenizer::format_chat (the model's own Jinja
// chat template when it has one, else a built-in format, docs/chat_templates.md; special tokens
// parsed, as `mpkv generate --chat`),
// completions encode the raw text.
// Structured outputs compile with a GrammarCompiler made at the first constrained request (the
// vocabulary's xgrammar tables cost a moment; a server that never sees one never pays it).
#pragma once
#include <memory>
#include <mutex>

#include "grammar/grammar_compiler.h"
#include "server/backend.h"

namespace mpkv::server {

class EngineBackend : public Backend {
 public:
  explicit EngineBackend(Engine& engine, GrammarCompilerOptions grammar = {}) : engine_(engine), grammar_opts_(grammar) {}
  ChatPrompt chat_prompt(const ChatTemplateInputs& inputs) const override;
  std::string chat_template_source() const override { return engine_.tokenizer().chat_template_source(); }
  std::vector<int32_t> encode_special(const std::string& text) const override {
    return engine_.tokenizer().encode(text, /*add_bos=*/false, /*parse_special=*/true);
  }
  std::vector<int32_t> encode_prompt(const std::string& text, bool add_special) const override;
  std::string token_text(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids) const override { return engine_.tokenizer().decode(ids); }
  int n_ctx() const override { return engine_.options().n_ctx; }
  int n_vocab() const override { return engine_.tokenizer().n_vocab(); }
  uint64_t add_request(RequestParams params, OutputCallback on_output) override;
  void abort(uint64_t id) override { engine_.abort(id); }
  EngineMetrics metrics() const override;
  std::shared_ptr<const CompiledConstraint> compile_constraint(const Constraint& c) override;

 private:
  Engine& engine_;
  GrammarCompilerOptions grammar_opts_;
  mutable std::mutex grammar_mu_;
  std::unique_ptr<GrammarCompiler> grammar_;  // made by the first compile_constraint
};

}  // namespace mpkv::server
