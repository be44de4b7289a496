// mpkv ppl: perplexity of a text file, llama.cpp protocol (windows of -c, second half scored).
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "eval/perplexity.h"
#include "kvcache/kv_cache_factory.h"
#include "kvcache/run_budget.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv::cli {

void register_ppl(CLI::App& app) {
  struct Args { std::string model, file, json; int n_ctx = 512, chunks = -1, threads = 0, batch = 512; KvCacheOptions kv; };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("ppl", "perplexity of a text file (llama.cpp protocol)");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-f,--file", a->file, "text file")->required();
  sub->add_option("-c,--ctx,--ctx-size", a->n_ctx, "window size; the second half of each window is scored")
      ->capture_default_str()->check(integer_in(8, 1 << 20, "in [8, 1048576]"));
  sub->add_option("--chunks", a->chunks, "score at most this many windows (-1: all)")
      ->capture_default_str()->check(minus_one_or_positive());
  sub->add_option("-b,--batch", a->batch, "prefill a window in forward calls of at most this many tokens (halved while the KV budget cannot take them)")
      ->capture_default_str()->check(integer_in(1, 1 << 20, ">= 1"));
  add_threads_option(sub, a->threads);
  sub->add_option("--json", a->json, "also write the result as JSON to this file");
  add_kv_cache_options(sub, a->kv);
  sub->callback([a, sub] {
    check_kv_flags(sub, a->kv);
    cap_kv_sizes(a->kv, a->n_ctx);
    validate(a->kv);
    apply_threads(a->threads);
    auto model = load_model(a->model, a->n_ctx);
    a->kv.model = kv_model_identity(*model);  // a --kv-plan for another model is an Error
    const Tokenizer tok = Tokenizer::from_gguf(model->gguf());
    const std::string text = read_text_file(a->file);
    const auto tokens = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
    PerplexityOptions o;
    o.n_ctx = a->n_ctx;
    o.max_chunks = a->chunks;
    o.batch = a->batch;
    o.add_bos = tok.add_bos();
    o.bos = tok.bos();
    const ModelConfig& c = model->config();
    MPKV_CHECK(a->n_ctx <= c.n_ctx_train * 4, "context " + std::to_string(a->n_ctx) + " is far beyond the model's trained context");
    const KvDims dims = c.kv_dims();
    // A progressive plan without --kv-budget-mib: the bytes one window needs with its full pages at
    // their final bits, not the budget of a longer sequence it was solved for (kvcache/run_budget.h).
    a->kv.budget_mib = run_budget_mib(a->kv, dims, 1, a->n_ctx);
    // Validates the options and the budget before any output.
    warn_if_nothing_quantized(make_kv_cache(a->kv, dims)->plan(), a->n_ctx);
    std::fprintf(stderr, "ppl: %zu tokens in %s; windows of %d, second half scored, prefilled in chunks of <= %d\n",
                 tokens.size(), a->file.c_str(), a->n_ctx, a->batch);
    const std::string kv = describe(a->kv);
    const PerplexityResult r = perplexity(*model, tokens, o, [&] { return make_kv_cache(a->kv, dims); });
    std::printf("PPL = %.4f +/- %.4f  (kv %s, %d windows x %d tokens = %lld tokens used of %zu, %lld scored, %.1f s, %.0f tok/s)\n",
                r.ppl, r.ppl_stderr, kv.c_str(), r.n_chunks, a->n_ctx, (long long)r.n_tokens_used, tokens.size(),
                (long long)r.n_scored, r.seconds, r.n_tokens_used / r.seconds);
    if (!a->json.empty()) {
      nlohmann::json j = {{"model", a->model}, {"file", a->file}, {"n_ctx", a->n_ctx}, {"batch", a->batch}, {"chunks", r.n_chunks},
                          {"tokens_in_file", tokens.size()}, {"tokens_used", r.n_tokens_used}, {"scored", r.n_scored},
                          {"ppl", r.ppl}, {"ppl_stderr", r.ppl_stderr}, {"mean_nll", r.mean_nll}, {"kv", kv},
                          {"seconds", r.seconds}};
      write_file_atomic(a->json, j.dump(2) + "\n");
    }
  });
}

}  // namespace mpkv::cli
