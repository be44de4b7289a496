// Sampler cost per token at vocabulary 49152 (SmolLM2) and 262144 (Gemma 3): the O(vocab) sampler
// (src/engine/sampler.cpp, docs/design.md "Sampling") next to the implementation before it, which
// partial_sorted the top_k (all of the vocabulary with top_k = 0) pairs every token (copied here
// as the "before" reference). Median nanoseconds per sample() over --reps calls of each, the two
// alternating, one thread.
//
// Logits: normal with sigma 3 (a fixed seed), so the top-p nucleus is a few hundred tokens at
// temperature 0.8; real model logits are more peaked, which favours the new sampler further.
//
// Usage: bench_sampler [--reps R]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

// The sampler before the O(vocab) rewrite (no repetition penalty: the settings here leave it off).
struct BeforeSampler {
  explicit BeforeSampler(mpkv::SamplerOptions opts) : o(opts), rng(opts.seed) {}
  mpkv::SamplerOptions o;
  std::mt19937_64 rng;
  std::vector<std::pair<float, int32_t>> cand;
  int32_t sample(const float* logits, int n) {
    if (o.temperature == 0.0f) return mpkv::sampler_argmax_ref(logits, n);  // the scalar loop
    cand.resize(n);
    for (int i = 0; i < n; ++i) cand[i] = {logits[i], i};
    const int k = o.top_k > 0 ? std::min(o.top_k, n) : n;
    std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    cand.resize(k);
    const float mx = cand[0].first;
    double sum = 0.0;
    for (auto& c : cand) sum += (c.first = std::exp((c.first - mx) / o.temperature));
    double cum = 0.0;
    size_t keep = cand.size();
    for (size_t i = 0; i < cand.size(); ++i)
      if ((cum += cand[i].first / sum) >= o.top_p) {
        keep = i + 1;
        break;
      }
    if (o.min_p > 0.0f) {
      size_t km = 1;
      while (km < keep && cand[km].first >= o.min_p) ++km;
      keep = km;
    }
    double kept = 0.0;
    for (size_t i = 0; i < keep; ++i) kept += cand[i].first;
    double r = std::uniform_real_distribution<double>(0.0, kept)(rng);
    for (size_t i = 0; i < keep; ++i)
      if ((r -= cand[i].first) <= 0.0) return cand[i].second;
    return cand[keep - 1].second;
  }
};

// Median ns per sample() of a and b, measured alternately (a, b, a, b, ...) so that a load that
// changes during the run (other processes on a shared machine) falls on both alike.
template <class A, class B>
std::pair<double, double> median_ns(A& a, B& b, const std::vector<float>& l, int reps) {
  std::vector<double> ta(reps), tb(reps);
  volatile int32_t sink = 0;
  auto time = [&](auto& s) {
    const auto t0 = Clock::now();
    sink = sink + s.sample(l.data(), (int)l.size());
    return std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  };
  for (int r = 0; r < reps; ++r) {
    ta[r] = time(a);
    tb[r] = time(b);
  }
  std::nth_element(ta.begin(), ta.begin() + reps / 2, ta.end());
  std::nth_element(tb.begin(), tb.begin() + reps / 2, tb.end());
  return {ta[reps / 2], tb[reps / 2]};
}

// Normal logits with sigma 3, a fixed seed.
std::vector<float> bench_logits(int n) {
  std::mt19937 g(42);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> l(n);
  for (float& x : l) x = nd(g);
  return l;
}

// Median ns per call of each sampler kernel at every tier this CPU runs (sampler_kernels.h).
void kernel_table(const std::vector<float>& l, int reps) {
  const int n = (int)l.size();
  std::vector<float> w(n);
  std::vector<int32_t> ids(n);
  const float mx = *std::max_element(l.begin(), l.end());
  for (mpkv::Isa isa : {mpkv::Isa::scalar, mpkv::Isa::avx2, mpkv::Isa::avx512}) {
    if (isa > mpkv::best_isa()) break;
    const mpkv::SamplerKernels& k = mpkv::sampler_kernels_for(isa);
    auto median = [&](auto&& f) {
      std::vector<double> t(reps);
      for (double& x : t) {
        const auto t0 = Clock::now();
        f();
        x = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      }
      std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
      return t[reps / 2];
    };
    volatile double sink = 0;
    const double a = median([&] { sink = sink + k.argmax(l.data(), n); });
    const double m = median([&] { sink = sink + k.max_value(l.data(), n); });
    const double e = median([&] { sink = sink + k.exp_weights(l.data(), n, mx, 0.8f, w.data()); });
    const double s = median([&] { sink = sink + k.select_range(l.data(), n, mx - 2.0f, INFINITY, ids.data()); });
    std::printf("%-8d %-8s %12.0f %12.0f %12.0f %12.0f\n", n, mpkv::isa_name(isa), a, m, e, s);
  }
}

struct Setting {
  const char* name;
  float temperature, top_p, min_p;
  int top_k;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 41;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_sampler [--reps R]\n");
      return 2;
    }
  }
  if (reps < 1) reps = 1;
  const Setting settings[] = {{"greedy", 0.0f, 1.0f, 0.0f, 0},
                              {"top_k=40 top_p=0.95", 0.8f, 0.95f, 0.0f, 40},
                              {"top_k=0 top_p=0.95", 0.8f, 0.95f, 0.0f, 0},
                              {"top_k=0 top_p=1", 0.8f, 1.0f, 0.0f, 0},
                              {"top_k=0 top_p=1 min_p=0.05", 0.8f, 1.0f, 0.05f, 0}};
  std::printf("%-8s %-8s %12s %12s %12s %12s\n", "vocab", "isa", "argmax_ns", "max_ns", "exp_wts_ns", "select_ns");
  for (int n : {49152, 262144}) {
    kernel_table(bench_logits(n), reps);
  }
  std::printf("%-8s %-28s %12s %12s %7s\n", "vocab", "setting", "before_ns", "after_ns", "ratio");
  for (int n : {49152, 262144}) {
    const std::vector<float> l = bench_logits(n);
    for (const Setting& st : settings) {
      mpkv::SamplerOptions o;
      o.temperature = st.temperature;
      o.top_p = st.top_p;
      o.top_k = st.top_k;
      o.min_p = st.min_p;
      o.repeat_last_n = 0;
      BeforeSampler before(o);
      mpkv::Sampler after(o);
      const auto [b, a] = median_ns(before, after, l, reps);
      std::printf("%-8d %-28s %12.0f %12.0f %6.1fx\n", n, st.name, b, a, b / a);
    }
  }
  return 0;
}
