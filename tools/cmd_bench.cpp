// mpkv bench: prefill and decode throughput of the engine (a benchmark, not a test).
//
// Token ids are a fixed pseudo-random sequence (speed does not depend on content), so the peer
// script bench/peer_llamacpp.py feeds llama.cpp exactly the same ids. Options as in llama-bench:
// -p prompt tokens, -n generated tokens, -d context depths, -r repetitions. Each figure is the
// median of the -r runs (each from an empty cache), with their standard deviation:
//   prefill  P tokens in chunks of --batch tokens;
//   decode@D the cache is first filled with D tokens, then N single-token steps are timed
//            (llama-bench's "tg N @ d D"). With --parallel N, N sequences are
//            filled and decode together (aggregate tok/s), each step in one forward call of all N
//            tokens as the serving engine's step (--max-batch M: calls of at most M tokens);
//            --parallel 1,2,4,8,16 sweeps batch widths at every depth (the width axis of
//            docs/results/speed.md; bench/bench_batch.py runs it beside llama.cpp);
//            --parallel 0 admits as many as the --kv-budget-mib holds for the whole context (PagedKvCache::
//            sequence_bytes_bound: full pages at their final bits, the newest at 16). With --synthetic
//            the fill appends random K/V straight into the cache instead of running the model
//            (speed only: contexts beyond what prefill can reach in reasonable time, e.g. 32K).
// Last, a roofline row per decode figure (bench_roofline.h): the bytes a step reads and the int8
// multiply-adds it does against the read bandwidth and int8 peak probed at start-up.
// The KV cache is built from the --kv-* options (kv_cache_factory.h); a --kv-plan must belong to
// the model, and its smoothing scales are applied as generate and ppl apply them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>

#include <nlohmann/json.hpp>

#include "bench_roofline.h"
#include "cli_options.h"
#include "cli_util.h"
#include "commands.h"
#include "engine/model_runner.h"
#include "engine/reserve_halving.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "util/cpu_features.h"
#include "util/error.h"
#include "util/units.h"

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

// Sample standard deviation of the repeated runs (0 for one run).
double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double m = 0.0, s = 0.0;
  for (double x : v) m += x / (double)v.size();
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (double)(v.size() - 1));
}

// "  1234.5 +/-   12.3 tok/s" and the JSON fields of one figure.
std::string figure(const std::vector<double>& runs) {
  char b[64];
  std::snprintf(b, sizeof b, "%8.1f +/- %6.1f tok/s", median(runs), stddev(runs));
  return b;
}
nlohmann::json figure_json(const std::vector<double>& runs) {
  return {{"tok_s", median(runs)}, {"tok_s_stddev", stddev(runs)}, {"tok_s_runs", runs}};
}

// CPU seconds of every thread of this process: on a shared machine, tokens per CPU-second of a
// 1-thread run barely depend on what else runs, where tokens per wall second do.
double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Runs ids[0, n) of seq through the model (ModelRunner::prefill: chunks of `batch`, halved while
// a budget cannot hold them), positions from 0.
void prefill(ModelRunner& runner, int seq, const std::vector<int32_t>& ids, int n, int batch) {
  const size_t done = runner.prefill(seq, std::span(ids.data(), (size_t)n), 0, batch, LogitSpan::last(n), nullptr);
  MPKV_CHECK(done == (size_t)n, "bench: the KV budget cannot hold " + std::to_string(n) + " tokens of sequence " +
                                    std::to_string(seq) + " (--kv-budget-mib)");
}

// Roughly standard normal numbers, cheaply (an 8K fill of 16 sequences draws 1.5 G of them):
// the sum of the four 16-bit quarters of one xorshift64 draw, centred and scaled to unit variance
// (Irwin-Hall with n = 4). Speed only: nothing measured depends on the exact distribution.
struct FastNormal {
  uint64_t x;
  float operator()() {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    const uint64_t sum = (x & 0xFFFF) + (x >> 16 & 0xFFFF) + (x >> 32 & 0xFFFF) + (x >> 48);
    return ((float)sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;  // var of one U(0,1) is 1/12
  }
};

// Appends n random K/V positions (fixed seed; keys with a few outlier channels) to every layer of
// seq, in chunks of `batch` halved while the cache cannot reserve them (reserve_halving).
void synthetic_fill(PagedKvCache& cache, int seq, int n, int batch) {
  const KvDims& d = cache.dims();
  const size_t row = (size_t)d.n_head_kv * d.head_dim;
  FastNormal nd{0x9E3779B97F4A7C15ull + 7919ull * (uint64_t)seq};
  std::vector<float> k((size_t)batch * row), v((size_t)batch * row);
  for (int s = 0; s < n;) {
    const int m = reserve_halving(cache, seq, std::min(batch, n - s));
    MPKV_CHECK(m > 0, "bench: the KV budget cannot hold the synthetic context");
    for (int l = 0; l < d.n_layer; ++l) {
      for (size_t i = 0; i < (size_t)m * row; ++i) {
        k[i] = nd() * (i % 37 == 5 ? 8.0f : 1.0f);
        v[i] = nd();
      }
      cache.append(seq, l, m, k.data(), v.data());
    }
    s += m;
  }
}

// What one decode figure is measured on: `parallel` sequences filled to `ctx` tokens, then `n_gen`
// steps of one token each, in forward calls of at most `max_batch` tokens (0: all of a step).
struct DecodeRun {
  int ctx, parallel, n_gen, max_batch, fill_chunk;
  bool synthetic;
};

struct DecodeRate {
  double tok_s, cpu_tok_s, kv_mib;  // aggregate tokens per wall / per CPU second; the pool's peak
  StepWork step;                    // what the last step read and multiplied (bench_roofline.h)
};

// One timed run from an empty cache.
DecodeRate time_decode(const Model& model, const KvCacheOptions& kv, const DecodeRun& d, const std::vector<int32_t>& ids) {
  auto cache = make_kv_cache(kv, model.config().kv_dims());
  ModelRunner runner(model, *cache);  // applies a plan's key smoothing
  for (int s = 0; s < d.parallel; ++s) {
    if (d.synthetic) synthetic_fill(*cache, s, d.ctx, d.fill_chunk);
    else if (d.ctx > 0) prefill(runner, s, ids, d.ctx, d.fill_chunk);
  }
  const int per_call = d.max_batch > 0 ? d.max_batch : d.parallel;
  std::vector<float> logits;
  std::vector<BatchToken> b;
  const double t0 = now_s(), c0 = cpu_s();
  for (int i = 0; i < d.n_gen; ++i) {
    for (int s0 = 0; s0 < d.parallel; s0 += per_call) {  // forward calls of <= per_call tokens
      b.clear();
      for (int s = s0; s < std::min(d.parallel, s0 + per_call); ++s) {
        MPKV_CHECK(cache->reserve(s, 1), "bench: the KV budget cannot hold the decode context");
        b.push_back({ids[d.ctx + i], d.ctx + i, s, true});
      }
      runner.run(b, logits);
    }
  }
  const double tokens = (double)d.n_gen * d.parallel, wall = now_s() - t0, cpu = cpu_s() - c0;
  const int calls = (d.parallel + per_call - 1) / per_call;
  return {tokens / wall, tokens / cpu, cache->pool().peak_used() / 1048576.0,
          decode_step_work(model, *cache, d.parallel, calls, d.ctx + d.n_gen - 1)};
}

// --parallel 0: as many sequences as the budget holds to the end of the run.
int admitted_sequences(const KvCacheOptions& kv, const KvDims& dims, int tokens) {
  MPKV_CHECK(kv.budget_mib > 0, "--parallel 0 needs --kv-budget-mib");
  auto probe = make_kv_cache(kv, dims);
  const KvByteModel& bytes = probe->byte_model();
  const int n = (int)bytes.sequences_within(probe->budget_bytes(), tokens);
  MPKV_CHECK(n > 0, "the budget cannot hold one sequence of " + std::to_string(tokens) + " tokens");
  // The second figure is what `mpkv serve` admits a sequence against while its prefix cache is on
  // (the block records it may publish, docs/serving.md "Prefix cache"): bench/serve_sweep.py sizes
  // its budgets by it.
  std::printf("admitted %d sequences of %d tokens (%.2f MiB each at most; %.2f MiB with prefix-cache records) in %s MiB\n",
              n, tokens, bytes.sequence_bytes_bound(tokens) / 1048576.0,
              (bytes.sequence_bytes_bound(tokens) + bytes.prefix_records_bound(tokens)) / 1048576.0,
              format_number(kv.budget_mib).c_str());
  return n;
}

}  // namespace

void register_bench(CLI::App& app) {
  struct Args {
    std::string model, json;
    int threads = 0, prompt = 512, batch = 512, decode = 32, reps = 3;
    std::vector<int> parallel{1};  // batch widths
    int max_batch = 0;             // decode tokens per forward call (0: all of a step)
    bool synthetic = false;
    std::vector<int> depths{128, 4096};
    KvCacheOptions kv;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("bench", "measure prefill and decode tok/s");
  sub->add_option("-m,--model", a->model, "GGUF model file")->required();
  add_threads_option(sub, a->threads);
  sub->add_option("-p,--n-prompt", a->prompt, "prefill tokens")->capture_default_str()->check(integer_in(1, 1 << 24, ">= 1"));
  sub->add_option("-b,--batch", a->batch, "prefill chunk")->capture_default_str()->check(integer_in(1, 1 << 24, ">= 1"));
  sub->add_option("-n,--n-gen", a->decode, "generated tokens timed at each depth")
      ->capture_default_str()->check(integer_in(1, 100000, "in [1, 100000]"));
  sub->add_option("-d,--depth", a->depths, "context depths (tokens in the cache before the timed steps), e.g. -d 128,4096")
      ->capture_default_str()->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(integer_in(0, 1 << 24, ">= 0"));
  sub->add_option("-r,--repetitions", a->reps, "runs of each figure (median and standard deviation reported)")
      ->capture_default_str()->check(integer_in(1, 1000, "in [1, 1000]"));
  sub->add_option("--json", a->json, "write results as JSON");
  sub->add_option("--parallel", a->parallel,
                  "sequences decoded together at each depth, e.g. --parallel 1,2,4,8,16 (0: as many as --kv-budget-mib holds)")
      ->capture_default_str()->delimiter(',')->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->check(integer_in(0, 1024, "in [0, 1024]"));
  sub->add_option("--max-batch", a->max_batch, "decode tokens per forward call with --parallel (0: all of a step)")
      ->capture_default_str()->check(integer_in(0, 4096, "in [0, 4096]"));
  sub->add_flag("--synthetic", a->synthetic, "fill decode contexts with random K/V instead of prefill (speed only)");
  add_kv_cache_options(sub, a->kv);
  sub->callback([a, sub] {
    check_kv_flags(sub, a->kv);
    MPKV_CHECK(!a->depths.empty(), "give at least one depth with -d");
    const int max_ctx = std::max(a->prompt, *std::max_element(a->depths.begin(), a->depths.end()) + a->decode);
    cap_kv_sizes(a->kv, max_ctx);
    validate(a->kv);
    const int threads = apply_threads(a->threads);
    auto model = load_model(a->model, max_ctx);
    const ModelConfig& c = model->config();
    const auto ids = bench_tokens(max_ctx, c.n_vocab);
    const KvDims dims = c.kv_dims();
    a->kv.model = kv_model_identity(*model);  // a --kv-plan for another model is an Error
    make_kv_cache(a->kv, dims);  // validates the options and the budget before any work
    const std::string kv = describe(a->kv);
    std::printf("mpkv bench: %s, %d threads, isa %s, kv %s, median +/- standard deviation of %d runs\n", c.name.c_str(), threads,
                isa_name(active_isa()), kv.c_str(), a->reps);
    const MachineLimits limits = probe_machine_limits(threads);
    nlohmann::json out = {{"engine", "mpkv"}, {"model", a->model}, {"threads", threads}, {"isa", isa_name(active_isa())},
                          {"kv", kv}, {"parallel", a->parallel}, {"synthetic", a->synthetic},
                          {"machine", {{"read_gb_s", limits.read_gbs}, {"int8_peak_macs", limits.int8_peak_macs},
                                       {"int8_peak_probe", limits.peak_probe}}}};

    std::vector<double> pf;
    for (int r = 0; r < a->reps; ++r) {
      auto cache = make_kv_cache(a->kv, dims);
      ModelRunner runner(*model, *cache);  // applies a plan's key smoothing
      const double t0 = now_s();
      prefill(runner, 0, ids, a->prompt, a->batch);
      pf.push_back(a->prompt / (now_s() - t0));
    }
    std::printf("prefill %5d tokens      %s\n", a->prompt, figure(pf).c_str());
    out["prefill"] = figure_json(pf);
    out["prefill"]["tokens"] = a->prompt;
    out["n_gen"] = a->decode;

    std::vector<std::string> roofline;
    for (int ctx : a->depths) {
      for (int width : a->parallel) {
        const int parallel = width > 0 ? width : admitted_sequences(a->kv, dims, ctx + a->decode);
        const DecodeRun run{ctx, parallel, a->decode, a->max_batch, a->batch, a->synthetic};
        std::vector<double> dv, cpu;
        double kv_mib = 0;
        StepWork step;
        for (int r = 0; r < a->reps; ++r) {
          DecodeRate x = time_decode(*model, a->kv, run, ids);
          dv.push_back(x.tok_s);
          cpu.push_back(x.cpu_tok_s);
          kv_mib = x.kv_mib;
          step = std::move(x.step);
        }
        const double step_seconds = parallel / median(dv);
        std::printf("decode %4d @ depth %5d %s%s   (KV %.1f MiB; %.1f tok per CPU-second)\n", a->decode, ctx,
                    figure(dv).c_str(), parallel > 1 ? (" (" + std::to_string(parallel) + " sequences)").c_str() : "",
                    kv_mib, median(cpu));
        roofline.push_back(roofline_row(ctx, parallel, step, step_seconds, limits));
        nlohmann::json d = figure_json(dv);
        d.update({{"context", ctx}, {"depth", ctx}, {"kv_mib", kv_mib}, {"sequences", parallel},
                  {"cpu_tok_s", median(cpu)}, {"cpu_tok_s_runs", cpu},
                  {"roofline", roofline_json(step, step_seconds, limits)}});
        out["decode"].push_back(d);
      }
    }
    std::printf("roofline of a decode step (%s):\n%s\n", describe(limits).c_str(), roofline_header().c_str());
    for (const std::string& row : roofline) std::printf("%s\n", row.c_str());
    if (!a->json.empty()) write_file_atomic(a->json, out.dump(2) + "\n");
  });
}

}  // namespace mpkv::cli
