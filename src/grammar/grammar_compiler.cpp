#include "grammar/grammar_compiler.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "grammar/constraint_error.h"
#include "grammar/grammar_vocab.h"
#include "grammar/schema_check.h"

namespace mpkv {

namespace {
using ojson = nlohmann::ordered_json;

// Any JSON object: OpenAI's json_object (xgrammar's built-in grammar also allows arrays and scalars).
constexpr const char* kAnyObjectSchema = R"({"type": "object", "additionalProperties": true})";

// A string as an EBNF literal: quotes, backslashes and control characters escaped (\uXXXX: fixed
// width, unlike xgrammar's greedy \x).
std::string ebnf_literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// choice: a JSON array of non-empty strings -> root ::= "a" | "b" | ...
std::string choice_grammar(const std::string& text) {
  const ojson a = ojson::parse(text, nullptr, false);
  if (!a.is_array() || a.empty()) throw ConstraintError("the choices must be a non-empty array of strings");
  std::string g = "root ::=";
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_string() || a[i].get<std::string>().empty()) throw ConstraintError("every choice must be a non-empty string");
    g += (i ? " | " : " ") + ebnf_literal(a[i].get<std::string>());
  }
  return g;
}

// Input checks that need no compiler: JSON that parses, a schema check_schema accepts.
std::string prepared_schema(const std::string& text) {
  const ojson schema = ojson::parse(text, nullptr, false);
  if (schema.is_discarded()) throw ConstraintError("the schema is not valid JSON");
  check_schema(schema);
  return schema.dump();  // keys in the order sent (xgrammar's JSON reader keeps it too)
}

// The special tokens that are not stop tokens, as a mask (CompiledConstraint::never_allowed).
std::shared_ptr<const std::vector<uint32_t>> never_allowed_mask(const xgrammar::TokenizerInfo& info, int vocab_size) {
  auto m = std::make_shared<std::vector<uint32_t>>((vocab_size + 31) / 32, 0u);
  const std::vector<int32_t>& stop = info.GetStopTokenIds();
  for (int32_t t : info.GetSpecialTokenIds())
    if (t >= 0 && t < vocab_size && std::find(stop.begin(), stop.end(), t) == stop.end()) (*m)[t >> 5] |= 1u << (t & 31);
  return m;
}

// Whether a rule of g has a token budget. Read from the grammar's printed form, where a rule's
// attributes are `name[max_tokens=N, ...] ::=`; the same text inside a literal also counts, which
// only costs that grammar the check-first path.
bool has_token_budgets(const xgrammar::CompiledGrammar& g) {
  return g.GetGrammar().ToString().find("max_tokens=") != std::string::npos;
}

struct Outcome {
  std::shared_ptr<const CompiledConstraint> compiled;
  std::string error;  // set when the compile failed
};
using Clock = std::chrono::steady_clock;
// One compile, as its callers see it: the result to come, and when the worker started it (a
// caller's timeout counts from there, so a compile is not refused for the ones queued before it).
struct Pending {
  std::shared_future<Outcome> result;
  std::shared_ptr<std::atomic<int64_t>> started_ns;  // 0 until a worker takes the job
};
}  // namespace

struct GrammarCompiler::Impl {
  struct Job {
    Constraint c;
    std::promise<Outcome> done;
    std::shared_ptr<std::atomic<int64_t>> started_ns;
  };

  Impl(const Tokenizer& tok, int n_vocab, GrammarCompilerOptions o)
      : opts(o),
        vocab_size(n_vocab),
        xg(make_tokenizer_info(grammar_vocab(tok, n_vocab)), o.xgrammar_threads, /*cache_enabled=*/false) {
    MPKV_CHECK(opts.threads >= 1 && opts.xgrammar_threads >= 1, "grammar: compile threads must be at least 1");
    for (int i = 0; i < opts.threads; ++i) workers.emplace_back([this] { work(); });
  }
  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (std::thread& t : workers) t.join();
  }

  xgrammar::CompiledGrammar compile_kind(const Constraint& c) {
    switch (c.kind) {
      case ConstraintKind::json_schema: return xg.CompileJSONSchema(prepared_schema(c.text), /*any_whitespace=*/false);
      case ConstraintKind::json_object: return xg.CompileJSONSchema(kAnyObjectSchema, /*any_whitespace=*/false);
      case ConstraintKind::regex: return xg.CompileRegex(c.text);
      case ConstraintKind::choice: return xg.CompileGrammar(choice_grammar(c.text), "root");
      case ConstraintKind::grammar: return xg.CompileGrammar(c.text, "root");
    }
    throw InternalError("grammar: unknown constraint kind");
  }

  // The compile itself (a worker thread). xgrammar reports bad input by throwing.
  Outcome run(const Constraint& c) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (opts.test_before_compile) opts.test_before_compile(c);
      xgrammar::CompiledGrammar g = compile_kind(c);
      const bool budgets = has_token_budgets(g);
      std::call_once(never_allowed_once, [&] { never_allowed = never_allowed_mask(g.GetTokenizerInfo(), vocab_size); });
      const double s = record(t0);
      return {std::make_shared<const CompiledConstraint>(CompiledConstraint{c, std::move(g), vocab_size, s, never_allowed, budgets}), ""};
    } catch (const std::exception& e) {
      record(t0);
      return {nullptr, e.what()};
    }
  }
  double record(std::chrono::steady_clock::time_point t0) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(mu);
    st.compiles_total++;
    st.compile_seconds_total += s;
    return s;
  }

  void work() {
    for (;;) {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, nothing left
      Job job = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      job.started_ns->store(std::max<int64_t>(1, Clock::now().time_since_epoch().count()));
      Outcome o = run(job.c);
      job.done.set_value(std::move(o));
      lock.lock();
      --pending;
    }
  }

  // The cached (or queued) result for c; new_entry: it was not there.
  Pending lookup(const Constraint& c, bool& hit) {
    const std::string key = c.key();
    std::lock_guard lock(mu);
    st.requests_total++;
    if (auto it = index.find(key); it != index.end()) {
      lru.splice(lru.begin(), lru, it->second);  // most recently used first
      st.cache_hits_total++;
      hit = true;
      return it->second->second;
    }
    hit = false;
    if (pending >= opts.max_pending) {
      st.errors_total++;
      throw ConstraintError("the grammar compiler is busy (" + std::to_string(pending) + " compiles pending); retry later",
                            /*busy=*/true);
    }
    Job job{c, {}, std::make_shared<std::atomic<int64_t>>(0)};
    Pending f{job.done.get_future().share(), job.started_ns};
    queue.push_back(std::move(job));
    ++pending;
    lru.emplace_front(key, f);
    index[key] = lru.begin();
    while (lru.size() > opts.cache_entries) {
      index.erase(lru.back().first);
      lru.pop_back();
    }
    cv.notify_one();
    return f;
  }

  GrammarCompilerOptions opts;
  int vocab_size;
  xgrammar::GrammarCompiler xg;
  std::once_flag never_allowed_once;  // set by the first compile (its worker)
  std::shared_ptr<const std::vector<uint32_t>> never_allowed;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;
  size_t pending = 0;
  bool stopping = false;
  using Lru = std::list<std::pair<std::string, Pending>>;
  Lru lru;
  std::unordered_map<std::string, Lru::iterator> index;
  GrammarCompilerStats st;
  std::vector<std::thread> workers;  // last: they start once everything above exists
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tok, int n_vocab, GrammarCompilerOptions opts)
    : impl_(std::make_unique<Impl>(tok, n_vocab, opts)) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledConstraint> GrammarCompiler::compile(const Constraint& c) {
  if (c.text.size() > impl_->opts.max_text_bytes) {
    std::lock_guard lock(impl_->mu);
    impl_->st.requests_total++;
    impl_->st.errors_total++;
    throw ConstraintError("the " + std::string(to_string(c.kind)) + " is " + std::to_string(c.text.size()) +
                          " bytes; at most " + std::to_string(impl_->opts.max_text_bytes) + " are accepted");
  }
  bool hit = false;
  auto compiled_or_refused = [this, &c](const Outcome& o) {
    if (!o.compiled) {
      std::lock_guard lock(impl_->mu);
      impl_->st.errors_total++;
      throw ConstraintError("the " + std::string(to_string(c.kind)) + " was refused: " + o.error);
    }
    return o.compiled;
  };
  const Pending p = impl_->lookup(c, hit);
  const std::shared_future<Outcome>& f = p.result;
  const auto timeout = impl_->opts.compile_timeout;
  if (f.wait_for(timeout) != std::future_status::ready) {
    // The timeout bounds the compile's own time: one still queued behind others (a slow compile,
    // a starved machine) is busy (retry), not refused as too slow.
    const int64_t started = p.started_ns->load();
    if (started == 0) {
      std::lock_guard lock(impl_->mu);
      impl_->st.errors_total++;
      throw ConstraintError("the grammar compiler is busy: this " + std::string(to_string(c.kind)) +
                                "'s compile did not start within " + std::to_string(timeout.count()) +
                                " ms (other compiles came first); retry later",
                            /*busy=*/true);
    }
    const Clock::time_point deadline = Clock::time_point(Clock::duration(started)) + timeout;
    if (f.wait_until(deadline) == std::future_status::ready) return compiled_or_refused(f.get());
    std::lock_guard lock(impl_->mu);
    impl_->st.errors_total++;
    impl_->st.timeouts_total++;
    throw ConstraintError("compiling the " + std::string(to_string(c.kind)) + " took longer than " +
                          std::to_string(impl_->opts.compile_timeout.count()) + " ms");
  }
  return compiled_or_refused(f.get());
}

GrammarCompilerStats GrammarCompiler::stats() const {
  std::lock_guard lock(impl_->mu);
  GrammarCompilerStats s = impl_->st;
  s.cached = impl_->lru.size();
  return s;
}

int GrammarCompiler::vocab_size() const { return impl_->vocab_size; }

}  // namespace mpkv
