// The O(vocab) sampler against full-sort references written here (not calling the code under
// test): on 2000 random logit vectors (vocab 1..50000, ties included) and many settings, the same
// seed must give the same tokens, with the sampler kernels of every ISA tier this CPU runs
// (sampler_kernels.h: their weights differ from std::exp's by an ulp in about 1 of 2000, which
// moves a token only when a draw falls within ~1e-7 relative of a boundary). Two references:
//  - Reference: the rule docs/design.md ("Sampling") states: sort everything by (logit desc, id
//    asc); with top-k the candidates' total is summed in sorted order, without top-k in token-id
//    order; without top-k, top_p = 1 cuts nothing.
//  - Previous: the implementation before the O(vocab) sampler (partial_sort of pairs), which the
//    top-k path must match exactly on logits without ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace mpkv {
namespace {

struct RefSampler {
  RefSampler(SamplerOptions opts, bool prev) : o(opts), previous(prev), rng(opts.seed) {}
  SamplerOptions o;
  bool previous;  // the partial_sort implementation, else Reference
  std::mt19937_64 rng;
  std::deque<int32_t> hist;
  std::vector<int32_t> generated;  // every sampled token, for the OpenAI penalties

  std::vector<float> penalize(const float* x, int n) {
    std::vector<float> l(x, x + n);
    if (o.repeat_penalty != 1.0f) {
      std::vector<int32_t> seen(hist.begin(), hist.end());
      std::sort(seen.begin(), seen.end());
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      for (int32_t t : seen) l[t] = l[t] > 0.0f ? l[t] / o.repeat_penalty : l[t] * o.repeat_penalty;
    }
    for (int32_t t = 0; t < n; ++t) {
      const auto c = std::count(generated.begin(), generated.end(), t);
      if (c > 0) l[t] -= o.presence_penalty + (float)c * o.frequency_penalty;
    }
    for (const auto& [t, b] : o.logit_bias)
      if (t < n) l[t] += b;
    return l;
  }

  int32_t draw(const std::vector<float>& l, int n) {
    if (o.temperature == 0.0f) return (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
    std::vector<std::pair<float, int32_t>> c(n);
    for (int i = 0; i < n; ++i) c[i] = {l[i], i};
    const int k = o.top_k > 0 ? std::min(o.top_k, n) : n;
    const bool topk_path = previous || k < n;
    if (previous) {
      std::partial_sort(c.begin(), c.begin() + k, c.end(), [](auto& a, auto& b) { return a.first > b.first; });
    } else {
      std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    }
    c.resize(k);
    const float mx = c[0].first;
    for (auto& x : c) x.first = std::exp((x.first - mx) / o.temperature);
    double sum = 0.0;
    if (topk_path) {
      for (auto& x : c) sum += x.first;
    } else {
      for (int i = 0; i < n; ++i) sum += std::exp((l[i] - mx) / o.temperature);
    }
    size_t keep = c.size();
    if (topk_path || o.top_p < 1.0f) {
      double cum = 0.0;
      for (size_t i = 0; i < c.size(); ++i) {
        cum += c[i].first / sum;
        if (cum >= o.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (o.min_p > 0.0f) {
      size_t km = 1;
      while (km < keep && c[km].first >= o.min_p) ++km;
      keep = km;
    }
    double kept = sum;
    if (keep < c.size()) {
      kept = 0.0;
      for (size_t i = 0; i < keep; ++i) kept += c[i].first;
    }
    std::uniform_real_distribution<double> u(0.0, kept);
    double r = u(rng);
    for (size_t i = 0; i < keep; ++i) {
      r -= c[i].first;
      if (r <= 0.0) return c[i].second;
    }
    size_t last = keep - 1;  // rounding left some draw: the last kept token that weighs anything
    while (last > 0 && c[last].first <= 0.0) --last;
    return c[last].second;
  }

  int32_t sample(const float* x, int n) {
    const int32_t t = draw(penalize(x, n), n);
    generated.push_back(t);
    if (o.repeat_last_n > 0) {
      hist.push_back(t);
      if ((int)hist.size() > o.repeat_last_n) hist.pop_front();
    }
    return t;
  }
};

// One sampler per ISA tier this CPU runs, each expected to draw the reference's tokens.
struct TierSamplers {
  explicit TierSamplers(const SamplerOptions& o) {
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
      if (isa <= best_isa()) tiers.push_back({isa, std::make_unique<Sampler>(o, sampler_kernels_for(isa))});
  }
  // Every tier's next token must be want.
  void expect(const std::vector<float>& l, int32_t want, const std::string& where) {
    for (auto& [isa, s] : tiers) ASSERT_EQ(s->sample(l.data(), (int)l.size()), want) << isa_name(isa) << ": " << where;
  }
  std::vector<std::pair<Isa, std::unique_ptr<Sampler>>> tiers;
};

// Random logits: normal with a random scale; optionally rounded to a coarse grid (many ties).
std::vector<float> random_logits(std::mt19937& g, int n, bool ties) {
  std::normal_distribution<float> nd(0.0f, std::uniform_real_distribution<float>(0.2f, 8.0f)(g));
  std::vector<float> l(n);
  for (float& x : l) x = ties ? std::round(nd(g) * 2.0f) / 2.0f : nd(g);
  return l;
}

SamplerOptions random_options(std::mt19937& g, int n) {
  auto pick = [&](auto... v) {
    const std::vector<std::common_type_t<decltype(v)...>> a{v...};
    return a[std::uniform_int_distribution<size_t>(0, a.size() - 1)(g)];
  };
  SamplerOptions o;
  o.temperature = pick(0.0f, 0.3f, 0.7f, 1.0f, 1.5f, 4.0f);
  o.top_p = pick(1.0f, 0.95f, 0.9f, 0.5f, 0.999f, 0.1f);
  o.top_k = pick(0, 0, 1, 5, 40, 1000, n, n + 3);
  o.min_p = pick(0.0f, 0.0f, 0.05f, 0.2f);
  o.repeat_penalty = pick(1.0f, 1.0f, 1.1f, 0.9f);
  o.repeat_last_n = pick(0, 4, 64);
  o.seed = g();
  return o;
}

int random_vocab(std::mt19937& g) {
  const int r = std::uniform_int_distribution<int>(0, 9)(g);
  if (r < 3) return std::uniform_int_distribution<int>(1, 40)(g);
  if (r < 6) return std::uniform_int_distribution<int>(41, 2000)(g);
  return std::uniform_int_distribution<int>(2001, 50000)(g);
}

TEST(SamplerReference, SameTokensAsTheFullSortRuleOn2000Distributions) {
  std::mt19937 g(12345);
  int compared = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = random_vocab(g);
    const std::vector<float> l = random_logits(g, n, trial % 3 == 0);
    const SamplerOptions o = random_options(g, n);
    TierSamplers s(o);
    RefSampler ref(o, false);
    for (int draw = 0; draw < 4; ++draw) {  // successive draws: the rng and the penalty history advance
      ASSERT_NO_FATAL_FAILURE(s.expect(l, ref.sample(l.data(), n),
                                       "trial " + std::to_string(trial) + " draw " + std::to_string(draw) + " n " +
                                           std::to_string(n) + " T " + std::to_string(o.temperature) + " top_p " +
                                           std::to_string(o.top_p) + " top_k " + std::to_string(o.top_k) + " min_p " +
                                           std::to_string(o.min_p) + " penalty " + std::to_string(o.repeat_penalty)));
      ++compared;
    }
  }
  EXPECT_EQ(compared, 8000);
}

TEST(SamplerReference, TopKPathMatchesThePreviousImplementationWithoutTies) {
  std::mt19937 g(777);
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = random_vocab(g);
    const std::vector<float> l = random_logits(g, n, false);
    if (std::set<float>(l.begin(), l.end()).size() != l.size()) continue;  // ties: the old order was unspecified
    SamplerOptions o = random_options(g, n);
    o.top_k = std::uniform_int_distribution<int>(1, std::max(1, n - 1))(g);
    if (o.top_k >= n) continue;  // no limit: token-id-order total (docs/design.md, "Sampling")
    TierSamplers s(o);
    RefSampler prev(o, true);
    for (int draw = 0; draw < 3; ++draw) ASSERT_NO_FATAL_FAILURE(s.expect(l, prev.sample(l.data(), n), "trial " + std::to_string(trial)));
  }
}

// OpenAI's presence/frequency penalties and logit_bias on top of the settings above: still the
// reference's tokens (the adjustments are exact float additions in both).
TEST(SamplerReference, SameTokensWithOpenAiPenaltiesAndLogitBias) {
  std::mt19937 g(4242);
  for (int trial = 0; trial < 600; ++trial) {
    const int n = random_vocab(g);
    const std::vector<float> l = random_logits(g, n, trial % 3 == 0);
    SamplerOptions o = random_options(g, n);
    std::uniform_real_distribution<float> pen(-2.0f, 2.0f), bias(-100.0f, 100.0f);
    o.presence_penalty = trial % 2 ? pen(g) : 0.0f;
    o.frequency_penalty = trial % 3 ? pen(g) : 0.0f;
    for (int i = 0, nb = trial % 4; i < nb; ++i) o.logit_bias.push_back({std::uniform_int_distribution<int>(0, n + 2)(g), bias(g)});
    TierSamplers s(o);
    RefSampler ref(o, false);
    for (int draw = 0; draw < 6; ++draw)
      ASSERT_NO_FATAL_FAILURE(s.expect(l, ref.sample(l.data(), n), "trial " + std::to_string(trial) + " draw " + std::to_string(draw)));
  }
}

// The no-top-k walk needs levels below the first ones: a flat distribution at top_p = 1 draws from
// all of them, and weights that underflow to 0 sit in the last level.
TEST(SamplerReference, FlatAndUnderflowingDistributions) {
  std::vector<float> l(30000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = i % 2 ? -200.0f - (float)i : 0.001f * (float)(i % 97);
  for (float T : {0.5f, 1.0f, 50.0f}) {
    SamplerOptions o;
    o.temperature = T;
    o.top_k = 0;
    o.top_p = 1.0f;
    o.repeat_last_n = 0;
    TierSamplers s(o);
    RefSampler ref(o, false);
    for (int i = 0; i < 200; ++i) ASSERT_NO_FATAL_FAILURE(s.expect(l, ref.sample(l.data(), (int)l.size()), "T " + std::to_string(T)));
  }
}

}  // namespace
}  // namespace mpkv
