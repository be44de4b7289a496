// mpkv bench: prefill and decode throughput of the engine (a benchmark, not a test).
//
// Token ids are a fixed pseudo-random sequence (speed does not depend on content), so the peer
// script bench/peer_llamacpp.py feeds llama.cpp exactly the same ids. Each figure is the median
// of --reps runs, each from an empty cache:
//   prefill  P tokens in chunks of --batch tokens;
//   decode@C the cache is first filled with C - D/2 tokens, then D single-token steps are timed,
//            so the steps attend over contexts centred on C. With --parallel N, N sequences are
//            filled and decode together (aggregate tok/s), each step in forward calls of at most
//            --max-batch tokens (default kLinearSmallBatch = 8; linear_forward takes any count and
//            decodes each weight block once per tile of 4 tokens, so larger calls cost less per token);
//            --parallel 0 admits as many as the --kv-budget-mib holds for the whole context (PagedKvCache::
//            sequence_bytes_bound: full pages at their final bits, the newest at 16). With --synthetic
//            the fill appends random K/V straight into the cache instead of running the model
//            (speed only: contexts beyond what prefill can reach in reasonable time, e.g. 32K).
// The KV cache is built from the --kv-* options (kv_cache_factory.h); a --kv-plan must belong to
// the model, and its smoothing scales are applied as generate and ppl apply them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "commands.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "model/linear.h"
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

// Appends n random K/V positions (fixed seed; keys with a few outlier channels) to every layer of
// seq, in chunks of `batch` halved while the cache cannot reserve them (as generate() does).
void synthetic_fill(KvCache& cache, int seq, int n, int batch) {
  const KvDims& d = cache.dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  std::mt19937 rng(1234 + seq);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k((size_t)batch * row), v((size_t)batch * row);
  for (int s = 0; s < n;) {
    int m = std::min(batch, n - s);
    while (m > 1 && !cache.reserve(seq, m)) m /= 2;
    MPKV_CHECK(m > 1 || cache.reserve(seq, 1), "bench: the KV budget cannot hold the synthetic context");
    for (int l = 0; l < d.n_layer; ++l) {
      for (size_t i = 0; i < (size_t)m * row; ++i) {
        k[i] = nd(rng) * (i % 37 == 5 ? 8.0f : 1.0f);
        v[i] = nd(rng);
      }
      cache.append(seq, l, m, k.data(), v.data());
    }
    s += m;
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  struct Args {
    std::string model, json;
    int threads = 0, prompt = 512, batch = 512, decode = 32, reps = 3, parallel = 1;
    int max_batch = kLinearSmallBatch;  // decode tokens per forward call
    bool synthetic = false;
    std::vector<int> contexts{128, 4096};
    KvCacheOptions kv;
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
  sub->add_option("--parallel", a->parallel, "sequences decoded together at each context")->capture_default_str()->check(CLI::Range(0, 1024));
  sub->add_option("--max-batch", a->max_batch, "decode tokens per forward call with --parallel")->capture_default_str()->check(CLI::Range(1, 4096));
  sub->add_flag("--synthetic", a->synthetic, "fill decode contexts with random K/V instead of prefill (speed only)");
  add_kv_cache_options(sub, a->kv);
  sub->callback([a] {
    validate(a->kv);
    set_num_threads(a->threads);
    auto model = Model::load(a->model);
    const ModelConfig& c = model->config();
    for (int ctx : a->contexts) MPKV_CHECK(ctx > a->decode, "each --ctx must exceed --decode");
    const int max_ctx = std::max(a->prompt, *std::max_element(a->contexts.begin(), a->contexts.end()) + a->decode);
    const auto ids = bench_tokens(max_ctx, c.n_vocab);
    const KvDims dims{c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
    a->kv.model = kv_model_identity(*model);  // a --kv-plan for another model is an Error
    Forward fwd(*model);
    const int threads = a->threads > 0 ? a->threads : default_num_threads();
    // Validates the options and the budget before any work; a calibrated plan's key smoothing
    // (q *= lambda, k /= lambda before RoPE; kv_plan.h) goes to the forward, as in generate/ppl.
    fwd.set_qk_smoothing(make_kv_cache(a->kv, dims)->plan().smoothing);
    const std::string kv = describe(a->kv);
    std::printf("mpkv bench: %s, %d threads, isa %s, kv %s, median of %d\n", c.name.c_str(), threads,
                isa_name(active_isa()), kv.c_str(), a->reps);
    nlohmann::json out = {{"engine", "mpkv"}, {"model", a->model}, {"threads", threads}, {"isa", isa_name(active_isa())},
                          {"kv", kv}, {"parallel", a->parallel}, {"synthetic", a->synthetic}};

    std::vector<double> pf;
    for (int r = 0; r < a->reps; ++r) {
      auto cache = make_kv_cache(a->kv, dims);
      const double t0 = now_s();
      prefill(fwd, *cache, ids, a->prompt, a->batch);
      pf.push_back(a->prompt / (now_s() - t0));
    }
    std::printf("prefill %5d tokens      %8.1f tok/s\n", a->prompt, median(pf));
    out["prefill"] = {{"tokens", a->prompt}, {"tok_s", median(pf)}};

    for (int ctx : a->contexts) {
      std::vector<double> dv;
      double kv_mib = 0;
      int parallel = a->parallel;
      if (parallel == 0) {  // admission: as many sequences as the budget holds to the end of the run
        MPKV_CHECK(a->kv.budget_mib > 0, "--parallel 0 needs --kv-budget-mib");
        auto probe = make_kv_cache(a->kv, dims);
        parallel = (int)(probe->pool().budget() / probe->sequence_bytes_bound(ctx - a->decode / 2 + a->decode));
        MPKV_CHECK(parallel > 0, "the budget cannot hold one sequence of context " + std::to_string(ctx));
        std::printf("admitted %d sequences of %d tokens (%.2f MiB each at most) in %.1f MiB\n", parallel,
                    ctx - a->decode / 2 + a->decode, probe->sequence_bytes_bound(ctx - a->decode / 2 + a->decode) / 1048576.0,
                    a->kv.budget_mib);
      }
      for (int r = 0; r < a->reps; ++r) {
        auto cache = make_kv_cache(a->kv, dims);
        const int fill = ctx - a->decode / 2;
        for (int s = 0; s < parallel; ++s) {
          if (a->synthetic) {
            synthetic_fill(*cache, s, fill, a->batch);
          } else {
            for (int p0 = 0; p0 < fill;) {
              int m = std::min(a->batch, fill - p0);
              while (m > 1 && !cache->reserve(s, m)) m /= 2;
              MPKV_CHECK(m > 1 || cache->reserve(s, 1), "bench: the KV budget cannot hold the decode context");
              std::vector<BatchToken> b;
              for (int i = p0; i < p0 + m; ++i) b.push_back({ids[i], i, s, false});
              std::vector<float> logits;
              fwd.run(*cache, b, logits);
              p0 += m;
            }
          }
        }
        std::vector<float> logits;
        const double t0 = now_s();
        for (int i = 0; i < a->decode; ++i) {
          for (int s0 = 0; s0 < parallel; s0 += a->max_batch) {  // forward calls of <= max_batch tokens
            std::vector<BatchToken> b;
            for (int s = s0; s < std::min(parallel, s0 + a->max_batch); ++s) {
              MPKV_CHECK(cache->reserve(s, 1), "bench: the KV budget cannot hold the decode context");
              b.push_back({ids[fill + i], fill + i, s, true});
            }
            fwd.run(*cache, b, logits);
          }
        }
        dv.push_back((double)a->decode * parallel / (now_s() - t0));
        kv_mib = cache->pool().peak_used() / 1048576.0;
      }
      std::printf("decode  @ context %5d   %8.1f tok/s%s   (KV %.1f MiB)\n", ctx, median(dv),
                  parallel > 1 ? (" (" + std::to_string(parallel) + " sequences)").c_str() : "", kv_mib);
      out["decode"].push_back({{"context", ctx}, {"tok_s", median(dv)}, {"kv_mib", kv_mib}, {"sequences", parallel}});
    }
    if (!a->json.empty()) write_file_atomic(a->json, out.dump(2) + "\n");
  });
}

}  // namespace mpkv::cli
