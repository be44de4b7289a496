// Constraint -> CompiledConstraint, cached by kind + text (docs/structured_outputs.md,
// "Compilation"). compile() is called on the thread that parsed the request (an HTTP thread),
// never on the engine's stepping thread, so a slow compile delays only its own request. The work
// runs on the compiler's own threads; compile_timeout bounds a compile's own time, counted from when
// a worker starts it: a compile still running then is refused with ConstraintError (it goes on and
// lands in the cache, so the same constraint later is a hit), and a caller whose compile has not
// started within compile_timeout (queued behind others) gets a busy ConstraintError (retry later).
// Text over max_text_bytes, schemas check_schema refuses, and texts xgrammar rejects are
// ConstraintErrors too; so is a full compile queue (busy).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "grammar/compiled_constraint.h"
#include "grammar/constraint.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {

struct GrammarCompilerOptions {
  std::chrono::milliseconds compile_timeout{10000};
  size_t max_text_bytes = 64 * 1024;
  size_t cache_entries = 256;  // least recently used beyond this are dropped
  int threads = 1;             // compile workers (each compile also uses xgrammar's own threads)
  int xgrammar_threads = 2;    // xgrammar's threads per compile (mask precomputation)
  size_t max_pending = 16;     // compiles queued or running; more is busy
  // Tests only (no flag or caller in mpkv sets it): runs on the compile worker before each compile,
  // so a test can hold a compile for as long as it likes: a slow compile, made deterministic
  // (tests/unit/test_serving_compile_stall.cpp).
  std::function<void(const Constraint&)> test_before_compile;
};

struct GrammarCompilerStats {
  uint64_t requests_total = 0;    // compile() calls
  uint64_t cache_hits_total = 0;  // answered from the cache (compiled or being compiled)
  uint64_t compiles_total = 0;    // compilations finished, successful or not
  uint64_t errors_total = 0;      // compile() calls answered with a ConstraintError
  uint64_t timeouts_total = 0;    // of which: compile_timeout passed
  double compile_seconds_total = 0.0;
  size_t cached = 0;              // entries in the cache now
};

class GrammarCompiler {
 public:
  // n_vocab: the model's logits width (>= the tokenizer's vocabulary).
  GrammarCompiler(const Tokenizer& tok, int n_vocab, GrammarCompilerOptions opts = {});
  ~GrammarCompiler();  // waits for the compile in progress
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Thread-safe. Throws ConstraintError (see the header comment).
  std::shared_ptr<const CompiledConstraint> compile(const Constraint& c);
  GrammarCompilerStats stats() const;
  int vocab_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpkv
