// mpkv bench: prefill and decode throughput of the engine (a benchmark, not a test).
//
// Token ids are a fixed pseudo-random sequence (speed does not depend on content), so the peer
// script bench/peer_llamacpp.py feeds llama.cpp exactly the same ids. Each figure is the median
// of --reps runs, each from an empty cache:
//   prefill  P tokens in chunks of --batch tokens;
//   decode@C the cache is first filled with C - D/2 tokens, then D single-token steps are timed,
//            so the steps attend over contexts centred on C.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "util/cpu_features.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

std::vector<int32_t> bench_tokens(int n, int n_vocab) {
  std::vector<int32_t> t(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    t[i] = (int32_t)(x % (uint64_t)std::min(n_vocab, 32000));
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs ids[0, n) through the model in chunks of `batch`, positions from 0.
void prefill(Forward& fwd, KvCache& cache, const std::vector<int32_t>& ids, int n, int batch) {
  std::vector<float> logits;
  for (int s = 0; s < n; s += batch) {
    std::vector<BatchToken> b;
    for (int i = s; i < std::min(n, s + batch); ++i) b.push_back({ids[i], i, 0, i == n - 1});
    fwd.run(cache, b, logits);
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  struct Args {
    std::string model, json;
    int threads = 0, prompt = 512, batch = 512, decode = 32, reps = 3;
    std::vector<int> contexts{128, 4096};
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("bench", "measure prefill and decode tok/s");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  sub->add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str();
  sub->add_option("-p,--prompt", a->prompt, "prefill tokens")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("-b,--batch", a->batch, "prefill chunk")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("-d,--decode", a->decode, "decode steps timed per context")->capture_default_str()->check(CLI::Range(2, 100000));
  sub->add_option("--ctx", a->contexts, "decode contexts")->capture_default_str();
  sub->add_option("-r,--reps", a->reps, "repetitions (median reported)")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--json", a->json, "write results as JSON");
  sub->callback([a] {
    set_num_threads(a->threads);
    auto model = Model::load(a->model);
    const ModelConfig& c = model->config();
    for (int ctx : a->contexts) MPKV_CHECK(ctx > a->decode, "each --ctx must exceed --decode");
    const int max_ctx = std::max(a->prompt, *std::max_element(a->contexts.begin(), a->contexts.end()) + a->decode);
    const auto ids = bench_tokens(max_ctx, c.n_vocab);
    const KvDims dims{c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
    Forward fwd(*model);
    const int threads = a->threads > 0 ? a->threads : default_num_threads();
    std::printf("mpkv bench: %s, %d threads, isa %s, kv f16, median of %d\n", c.name.c_str(), threads,
                isa_name(active_isa()), a->reps);
    nlohmann::json out = {{"engine", "mpkv"}, {"model", a->model}, {"threads", threads}, {"isa", isa_name(active_isa())}};

    std::vector<double> pf;
    for (int r = 0; r < a->reps; ++r) {
      F16KvCache cache(dims);
      const double t0 = now_s();
      prefill(fwd, cache, ids, a->prompt, a->batch);
      pf.push_back(a->prompt / (now_s() - t0));
    }
    std::printf("prefill %5d tokens      %8.1f tok/s\n", a->prompt, median(pf));
    out["prefill"] = {{"tokens", a->prompt}, {"tok_s", median(pf)}};

    for (int ctx : a->contexts) {
      std::vector<double> dv;
      for (int r = 0; r < a->reps; ++r) {
        F16KvCache cache(dims);
        const int fill = ctx - a->decode / 2;
        prefill(fwd, cache, ids, fill, a->batch);
        std::vector<float> logits;
        const double t0 = now_s();
        for (int i = 0; i < a->decode; ++i) fwd.run(cache, {{ids[fill + i], fill + i, 0, true}}, logits);
        dv.push_back(a->decode / (now_s() - t0));
      }
      std::printf("decode  @ context %5d   %8.1f tok/s\n", ctx, median(dv));
      out["decode"].push_back({{"context", ctx}, {"tok_s", median(dv)}});
    }
    if (!a->json.empty()) write_file_atomic(a->json, out.dump(2) + "\n");
  });
}

}  // namespace mpkv::cli
