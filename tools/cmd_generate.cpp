// mpkv generate: stream a completion (or a chat reply with --chat) for a prompt; with --parallel N
// or --prompts FILE several sequences decode together over one shared KV cache (and budget).
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "engine/generator.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {
struct GenerateArgs {
  std::string model, prompt, prompts_file;
  int n_predict = 128, n_ctx = 4096, threads = 0, parallel = 1;
  bool chat = false, verbose = false;
  float temp = 0.8f, top_p = 0.95f;
  int top_k = 40;
  int64_t seed = -1;
  KvCacheOptions kv;
};

// The prompts: --prompts FILE (one per non-empty line), else --prompt repeated --parallel times.
std::vector<std::string> prompt_texts(const GenerateArgs& a) {
  std::vector<std::string> v;
  if (!a.prompts_file.empty()) {
    std::istringstream in(read_text_file(a.prompts_file));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) v.push_back(line);
    MPKV_CHECK(!v.empty(), "--prompts " + a.prompts_file + " holds no prompt (one per line)");
  } else {
    MPKV_CHECK(!a.prompt.empty(), "give a prompt with -p or a prompts file with --prompts");
    v.assign(a.parallel, a.prompt);
  }
  return v;
}

void run_generate(const GenerateArgs& a) {
  validate(a.kv);  // before loading anything
  const std::vector<std::string> texts = prompt_texts(a);
  set_num_threads(a.threads);
  auto model = Model::load(a.model);
  const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
  const ModelConfig& c = model->config();
  KvCacheOptions kv = a.kv;
  kv.model = kv_model_identity(*model);  // a --kv-plan for another model is an Error
  auto cache = make_kv_cache(kv, {c.n_layer, c.n_head, c.n_head_kv, c.head_dim});
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& p : texts) {
    const std::string text = a.chat ? tok.format_chat({{"user", p}}, true) : p;
    ids.push_back(tok.encode(text, tok.add_bos(), /*parse_special=*/a.chat));
  }

  GenerateOptions opts;
  opts.n_predict = a.n_predict;
  opts.n_ctx = a.n_ctx;
  opts.sampling.temperature = a.temp;
  opts.sampling.top_p = a.top_p;
  opts.sampling.top_k = a.top_k;
  opts.sampling.seed = a.seed >= 0 ? (uint64_t)a.seed
                                   : (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  if (a.verbose) {
    std::fprintf(stderr, "[kv] %s; plan %s, pages of %d tokens, window %d, sink %d\n", describe(a.kv).c_str(),
                 cache->plan().method.c_str(), cache->plan().page_tokens, cache->plan().window, cache->plan().sink);
  }
  // Shrink events: every pause is reported with --verbose; a summary is always printed below.
  const PagedKvCache* cp = cache.get();
  cache->set_shrink_listener([&, cp](const ShrinkPause& p) {
    if (!a.verbose) return;
    std::fprintf(stderr, "\n[kv] shrink for seq %d: %d page shrinks (%d -> %d bits), freed %.1f KiB in %.3f ms; in use %.2f / %.2f MiB\n",
                 p.for_seq, p.pages, p.from_bits, p.to_bits, p.bytes_freed / 1024.0, 1e3 * p.seconds,
                 cp->pool().used() / 1048576.0, cp->pool().budget() / 1048576.0);
  });
  GenerateStats stats;
  const bool stream = texts.size() == 1;
  if (stream && !a.chat) std::fputs(texts[0].c_str(), stdout);
  auto res = generate(*model, tok, *cache, ids, opts, stats, [&](int, int32_t t) {
    if (!stream || tok.is_end_of_generation(t)) return;
    const std::string piece = tok.token_piece(t);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  }, [&](int s, const SequenceResult& r) {
    if (a.verbose) std::fprintf(stderr, "\n[kv] sequence %d stops (%s) at %d tokens; before freeing it:\n%s\n", s,
                                r.stop_reason.c_str(), cache->length(s, 0), cache->stats().c_str());
  });
  std::fputs("\n", stdout);
  if (!stream) {
    for (size_t s = 0; s < res.size(); ++s) {
      std::string out;
      for (int32_t t : res[s].tokens)
        if (!tok.is_end_of_generation(t)) out += tok.token_piece(t);
      std::printf("--- sequence %zu (%zu tokens, stop: %s)\n%s%s\n", s, res[s].tokens.size(), res[s].stop_reason.c_str(),
                  a.chat ? "" : texts[s].c_str(), out.c_str());
    }
  }
  std::string reasons;
  for (size_t s = 0; s < res.size() && s < 8; ++s) reasons += (s ? "," : "") + res[s].stop_reason;
  if (res.size() > 8) reasons += ",...";
  std::fprintf(stderr, "\n[%s] %zu sequence(s), prompt %d tokens, %.1f tok/s | generated %d tokens, decode %.1f tok/s | stop: %s | seed %llu\n",
               c.name.c_str(), res.size(), stats.n_prompt_tokens, stats.prefill_tok_s(), stats.n_generated,
               stats.decode_tok_s(), reasons.c_str(), (unsigned long long)opts.sampling.seed);
  const ShrinkTotals& st = cache->shrink_totals();
  std::fprintf(stderr, "[kv] %s: peak %.2f MiB%s; %zu page shrinks in %zu pauses (longest %.3f ms, %.1f ms total)%s\n",
               describe(a.kv).c_str(), cache->pool().peak_used() / 1048576.0,
               a.kv.budget_mib > 0 ? (" of " + std::to_string(a.kv.budget_mib).substr(0, 7) + " MiB budget").c_str() : "",
               st.page_shrinks, st.pauses, 1e3 * st.max_pause_seconds, 1e3 * st.seconds,
               stats.n_kv_budget_stops ? (", " + std::to_string(stats.n_kv_budget_stops) + " sequence(s) stopped by kv_budget").c_str() : "");
}
}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand("generate", "generate text from a prompt (streams tokens)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-p,--prompt", a->prompt, "prompt text");
  sub->add_option("--prompts", a->prompts_file, "file with one prompt per line, decoded together");
  sub->add_option("--parallel", a->parallel, "decode this many copies of the prompt together")->capture_default_str()->check(CLI::Range(1, 4096));
  sub->add_option("-n,--n-predict", a->n_predict, "tokens to generate (-1: until end of generation)")->capture_default_str();
  sub->add_option("-c,--ctx", a->n_ctx, "context size per sequence (prompt + generated)")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_flag("--chat", a->chat, "format the prompt as a ChatML user message and reply as the assistant");
  sub->add_option("--temp", a->temp, "temperature (0: greedy)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", a->top_p, "nucleus sampling threshold")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  sub->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", a->seed, "sampling seed (-1: from the clock; the seed used is printed)")->capture_default_str();
  sub->add_flag("-v,--verbose", a->verbose, "report KV memory: every shrink pause, bytes in use, bits histogram");
  add_kv_cache_options(sub, a->kv);
  sub->callback([a] { run_generate(*a); });
}

}  // namespace mpkv::cli
