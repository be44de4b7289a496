// mpkv generate: stream a completion (or a chat reply with --chat) for a prompt; with --parallel N
// or --prompts FILE several sequences decode together over one shared KV cache (and budget).
//
// A client of the serving engine (engine/engine.h): every prompt becomes a request before anything
// is printed, so a prompt that can never fit (the context or the whole KV budget) is an error with
// no output; requests that cannot start yet wait in the engine's queue until others finish, so no
// work is dropped. Ctrl-C aborts the requests and still prints the summary (exit 130).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "engine/engine.h"
#include "engine/phase_time.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/units.h"

namespace mpkv::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompt_file, prompts_file;
  int n_predict = 128, n_ctx = 4096, threads = 0, parallel = 1;
  bool chat = false, verbose = false, no_parse_special = false, ignore_eos = false;
  SamplingArgs sampling;
  KvCacheOptions kv;
  bool prefix_cache = true;
  int prefix_cache_floor_bits = 0;
};

// Set by SIGINT; the stepping loop aborts every request when it sees it.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// Conflicts and empty inputs, before anything is read or loaded.
void check_flags(const GenerateArgs& a, const CLI::App* sub) {
  const bool p = given(sub, "--prompt"), f = given(sub, "--file"), many = given(sub, "--prompts");
  MPKV_CHECK(p + f + many <= 1, "give the prompt one way: -p TEXT, -f FILE or --prompts FILE");
  MPKV_CHECK(!(many && given(sub, "--parallel")), "--prompts decodes each line once; it conflicts with --parallel");
  MPKV_CHECK(p || f || many, "give a prompt with -p TEXT, -f FILE, or --prompts FILE (one prompt per line)");
  MPKV_CHECK(!p || !a.prompt.empty(), "the prompt is empty (-p \"\"); give some text");
  check_kv_flags(sub, a.kv);
}

// The prompts: --prompts FILE (one per non-empty line), else -p / -f repeated --parallel times.
std::vector<std::string> prompt_texts(const GenerateArgs& a) {
  std::vector<std::string> v;
  if (!a.prompts_file.empty()) {
    std::istringstream in(read_text_file(a.prompts_file));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) v.push_back(line);
    MPKV_CHECK(!v.empty(), "--prompts " + a.prompts_file + " holds no prompt (one per line)");
    return v;
  }
  const std::string text = a.prompt_file.empty() ? a.prompt : read_text_file(a.prompt_file);
  MPKV_CHECK(!text.empty(), "the prompt file " + a.prompt_file + " is empty");
  v.assign(a.parallel, text);
  return v;
}

// What the run produced, per request (in prompt order) and in total.
struct RunState {
  struct Seq {
    std::string text;
    int n_tokens = 0;
    FinishReason reason = FinishReason::none;
    RequestStats stats;
  };
  std::vector<Seq> seqs;
  std::map<uint64_t, size_t> index;  // engine id -> position in seqs
  double t_start = 0, t_last_first_token = 0, t_end = 0;
  std::vector<StepTime> steps;  // every step that forwarded tokens (engine/phase_time.h)
};

void print_summary(const GenerateArgs& a, const std::string& model_name, const Engine& engine, const RunState& st,
                   uint64_t seed, int threads) {
  int n_prompt = 0, n_gen = 0;
  std::string reasons;
  for (size_t s = 0; s < st.seqs.size(); ++s) {
    n_prompt += st.seqs[s].stats.n_prompt_tokens;
    n_gen += st.seqs[s].n_tokens;
    if (s < 8) reasons += std::string(s ? "," : "") + to_string(st.seqs[s].reason);
  }
  if (st.seqs.size() > 8) reasons += ",...";
  // Each step's wall time split by token share (engine/phase_time.h, docs/cli.md): prompt tok/s
  // over the prefill share, decode tok/s over the decode share, output tok/s over the whole run.
  const PhaseSeconds ph = split_phase_seconds(st.steps);
  const double wall = st.t_end - st.t_start;
  const EngineMetrics m = engine.metrics();
  std::fprintf(stderr,
               "\n[%s] %zu sequence(s), prompt %d tokens, %.1f tok/s | generated %d tokens, decode %.1f tok/s | "
               "output %.1f tok/s over %.2f s | %d threads | stop: %s | seed %llu\n",
               model_name.c_str(), st.seqs.size(), n_prompt, ph.prefill > 0 ? ph.prefill_tokens / ph.prefill : 0.0, n_gen,
               ph.decode > 0 ? ph.decode_tokens / ph.decode : 0.0, wall > 0 ? n_gen / wall : 0.0, wall, threads,
               reasons.c_str(), (unsigned long long)seed);
  const PagedKvCache& cache = engine.cache();
  const ShrinkTotals& sh = cache.shrink_totals();
  std::fprintf(stderr, "[kv] %s: peak %.2f MiB%s; %zu page shrinks in %zu pauses (longest %.3f ms, %.1f ms total); %llu preemptions\n",
               describe(a.kv).c_str(), cache.pool().peak_used() / 1048576.0,
               a.kv.budget_mib > 0 ? (" of " + format_number(a.kv.budget_mib) + " MiB budget").c_str() : "",
               sh.page_shrinks, sh.pauses, 1e3 * sh.max_pause_seconds, 1e3 * sh.seconds,
               (unsigned long long)m.preemptions_total);
  if (m.prefix_cache_on)
    std::fprintf(stderr, "[kv] prefix cache: %llu of %llu prompt tokens read from it; %zu blocks cached, %llu evicted\n",
                 (unsigned long long)m.prefix_cache_hits_total, (unsigned long long)m.prefix_cache_queries_total,
                 m.prefix_cache.blocks, (unsigned long long)m.prefix_cache.evictions);
}

// Steps the engine until it is idle, timing each step and reading its prefill / decode token
// counts from the engine's totals; on Ctrl-C aborts every request (their final events follow).
void run_engine(Engine& engine, RunState& st) {
  bool aborted = false;
  EngineMetrics before = engine.metrics();
  while (engine.has_work()) {
    if (g_interrupted.load() && !aborted) {
      for (const auto& [id, pos] : st.index) engine.abort(id);
      aborted = true;
    }
    const double t0 = now_s();
    engine.step();
    const double t1 = now_s();
    const EngineMetrics after = engine.metrics();
    const StepTime t{(int)(after.forwarded_prefill_tokens_total - before.forwarded_prefill_tokens_total),
                     (int)(after.forwarded_decode_tokens_total - before.forwarded_decode_tokens_total), t1 - t0};
    if (t.prefill_tokens + t.decode_tokens > 0) st.steps.push_back(t);
    before = after;
  }
}

void run_generate(const GenerateArgs& a, const CLI::App* sub) {
  check_flags(a, sub);
  KvCacheOptions kv = a.kv;
  cap_kv_sizes(kv, a.n_ctx);
  validate(kv);  // before loading anything
  const std::vector<std::string> texts = prompt_texts(a);
  const int threads = apply_threads(a.threads);
  auto model = load_model(a.model, a.n_ctx);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  kv.model = kv_model_identity(*model);  // a --kv-plan for another model is an Error
  if (a.chat && !tok.has_chat_template())  // docs/chat_templates.md, "Without a template"
    std::fprintf(stderr, "[chat] the model has no tokenizer.chat_template: --chat uses the %s format\n",
                 tok.chat_format_description().c_str());
  auto cache = make_kv_cache(kv, model->config().kv_dims());
  warn_if_nothing_quantized(cache->plan(), a.n_ctx);
  if (a.verbose) {
    std::fprintf(stderr, "[kv] %s; plan %s, pages of %d tokens, window %d, sink %d\n", describe(kv).c_str(),
                 kv_plan_method_name(cache->plan().method), cache->plan().page_tokens, cache->plan().window, cache->plan().sink);
    const PagedKvCache* cp = cache.get();
    cache->set_shrink_listener([cp](const ShrinkPause& p) {
      std::fprintf(stderr, "\n[kv] shrink for seq %d: %d page shrinks (%d -> %d bits), freed %.1f KiB in %.3f ms; in use %.2f / %.2f MiB\n",
                   p.for_seq, p.pages, p.from_bits, p.to_bits, p.bytes_freed / 1024.0, 1e3 * p.seconds,
                   cp->pool().used() / 1048576.0, cp->pool().budget() / 1048576.0);
    });
  }
  EngineOptions eo;
  eo.n_ctx = a.n_ctx;
  eo.max_seqs = (int)texts.size();
  eo.max_queue = (int)texts.size();
  eo.prefix_cache = a.prefix_cache;
  eo.prefix_cache_floor_bits = a.prefix_cache_floor_bits;
  Engine engine(*model, tok, std::move(cache), eo);

  const uint64_t seed = resolve_seed(a.sampling.seed);
  const bool stream = texts.size() == 1;
  RunState st;
  st.seqs.resize(texts.size());
  st.t_start = now_s();
  // Every request is checked and queued before the first byte of output.
  for (size_t s = 0; s < texts.size(); ++s) {
    RequestParams p;
    const std::string text = a.chat ? tok.format_chat({{"user", texts[s]}}, true) : texts[s];
    p.prompt = tok.encode(text, tok.add_bos(), !a.no_parse_special);
    p.max_tokens = a.n_predict;
    p.ignore_eos = a.ignore_eos;
    p.sampling = a.sampling.opts;
    p.sampling.seed = seed + s;  // distinct streams for copies of one prompt
    const uint64_t id = engine.add_request(std::move(p), [&, s](const RequestOutput& o) {
      RunState::Seq& q = st.seqs[s];
      if (q.n_tokens == 0 && !o.tokens.empty()) st.t_last_first_token = now_s();
      q.n_tokens += (int)o.tokens.size();
      q.text += o.text_delta;
      if (stream) {
        std::fwrite(o.text_delta.data(), 1, o.text_delta.size(), stdout);
        std::fflush(stdout);
      }
      if (!o.finished) return;
      q.reason = o.reason;
      q.stats = o.stats;
      if (a.verbose)
        std::fprintf(stderr, "\n[kv] sequence %zu stops (%s) after %d tokens, %d preemptions\n", s, to_string(o.reason),
                     o.stats.n_generated, o.stats.n_preemptions);
    });
    st.index[id] = s;
  }
  g_interrupted.store(false);
  std::signal(SIGINT, on_sigint);
  if (stream && !a.chat) std::fputs(texts[0].c_str(), stdout);
  run_engine(engine, st);
  std::signal(SIGINT, SIG_DFL);
  st.t_end = now_s();
  std::fputs("\n", stdout);
  if (!stream) {
    for (size_t s = 0; s < st.seqs.size(); ++s)
      std::printf("--- sequence %zu (%d tokens, stop: %s)\n%s%s\n", s, st.seqs[s].n_tokens, to_string(st.seqs[s].reason),
                  a.chat ? "" : texts[s].c_str(), st.seqs[s].text.c_str());
  }
  std::fflush(stdout);
  print_summary(a, model->config().name, engine, st, seed, threads);
  if (g_interrupted.load()) throw Interrupted();
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt (streams tokens)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", a->prompt, "prompt text");
  sub->add_option("-f,--file", a->prompt_file, "file holding the prompt");
  sub->add_option("--prompts", a->prompts_file, "file with one prompt per line, decoded together");
  sub->add_option("--parallel", a->parallel, "decode this many copies of the prompt together")
      ->capture_default_str()->check(integer_in(1, 4096, "in [1, 4096]"));
  sub->add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until end of generation or the context is full)")
      ->capture_default_str()->check(minus_one_or_positive());
  sub->add_option("-c,--ctx,--ctx-size", a->n_ctx, "context size per sequence (prompt + generated)")
      ->capture_default_str()->check(integer_in(2, 1 << 24, "in [2, 16777216]"));
  add_threads_option(sub, a->threads);
  sub->add_flag("--chat", a->chat, "format the prompt as a ChatML user message and reply as the assistant");
  sub->add_flag("--no-parse-special", a->no_parse_special, "treat special-token text in the prompt (<|im_end|>) as plain text");
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  add_sampling_options(sub, a->sampling);
  sub->add_flag("-v,--verbose", a->verbose, "report KV memory: every shrink pause, each sequence's end");
  add_kv_cache_options(sub, a->kv);
  add_prefix_cache_options(sub, a->prefix_cache, a->prefix_cache_floor_bits);
  sub->callback([a, sub] { run_generate(*a, sub); });
}

}  // namespace mpkv::cli
