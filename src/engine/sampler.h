// Next-token sampling: greedy at temperature 0, else temperature + top-k + top-p (nucleus) + min-p;
// llama.cpp's repetition penalty, OpenAI's presence/frequency penalties and logit bias before either.
//
// Order in sample():
//   0. the grammar's mask (docs/structured_outputs.md), when the request has one: tokens it does not
//      allow get logit -inf on a copy of the logits, before every other step, so greedy and sampled
//      choices, penalties and the top-k / top-p / min-p cuts only ever see allowed tokens;
//   1. logit adjustments, on a copy of the logits, only when one is set:
//      a. repetition penalty (when repeat_penalty != 1): every distinct token among the last
//         repeat_last_n accepted ones has its logit divided by the penalty when positive,
//         multiplied when negative (llama.cpp's penalties sampler);
//      b. presence/frequency penalties (OpenAI's rule): every token generated so far (sample()'s
//         tokens, not the prompt fed by accept()) loses presence_penalty + c * frequency_penalty,
//         c = how many times it was generated;
//      c. logit_bias: each listed token's bias is added;
//   2. temperature 0: argmax of the (penalized) logits;
//   3. else the top_k largest logits, p_i = softmax(logit_i / temperature) over them;
//   4. the kept set is the shortest prefix (most likely first) whose cumulative p reaches top_p,
//      further cut to the tokens with p_i >= min_p * p_max; one is drawn in proportion to p_i.
// Both cuts are prefixes of the sorted list, so their order does not matter. With the defaults of
// min_p (0), repeat_penalty (1), the OpenAI penalties (0) and an empty logit_bias sampling is what it was before those fields existed.
//
// Cost: O(n_vocab) SIMD passes per token (sampler_kernels.h: max, the weights when there is no
// top-k, a scan per level of logits the walk reaches) plus a sort of only the tokens the cuts and
// the draw reach, never of the whole vocabulary (docs/design.md, "Sampling", has the algorithm and
// what exactly is summed in which order, which fixes the tokens drawn for a seed).
#pragma once
#include <cstdint>
#include <deque>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sampler_kernels.h"

namespace mpkv {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy (argmax)
  float top_p = 0.95f;       // keep the smallest set of tokens whose probability reaches top_p
  int top_k = 40;            // 0 = no limit
  uint64_t seed = 0;
  float min_p = 0.0f;           // keep tokens with p >= min_p * p_max; 0 = off
  float repeat_penalty = 1.0f;  // 1 = off; > 1 discourages the last repeat_last_n tokens
  int repeat_last_n = 64;       // history the penalty looks at (0: none)
  float presence_penalty = 0.0f;   // [-2, 2]; subtracted once from every generated token's logit
  float frequency_penalty = 0.0f;  // [-2, 2]; subtracted once per time a token was generated
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id >= 0, bias in [-100, 100]); ids past
                                                      // the vocabulary are ignored
};
inline constexpr float kMaxOpenAiPenalty = 2.0f;
inline constexpr float kMaxLogitBias = 100.0f;

// Check-first sampling under a grammar (docs/structured_outputs.md, "Masks in the engine"): draw
// without the mask (Sampler::propose), keep the token when the grammar takes it, else fill the mask
// and sample under it. True where that gives exactly the masked distribution:
//   - temperature 0 (greedy, whatever the other options): the argmax of the adjusted logits, when
//     allowed, is the argmax of the masked ones (the mask only lowers other tokens to -inf, and
//     the first index of the largest stays the first);
//   - temperature > 0 without a cut (top_k 0, top_p 1, min_p 0): a draw t from p kept when allowed,
//     else a draw from p over the allowed set S renormalised, has P(t) = p(t) + (1 - p(S)) p(t) / p(S)
//     = p(t) / p(S), the masked distribution.
// False with any cut (top-k, top-p, min-p): the cuts pick their candidates from the masked
// distribution, which the unmasked one does not show. The penalties and the logit bias change each
// token's logit alike with or without the mask, so they change nothing here.
bool check_first_exact(const SamplerOptions& opts);

class Sampler {
 public:
  // Throws Error for values outside their ranges (temperature < 0, top_p outside (0, 1], top_k < 0,
  // min_p outside [0, 1], repeat_penalty <= 0, repeat_last_n < 0, presence/frequency penalty
  // outside [-2, 2], a logit_bias with a negative id or a bias outside [-100, 100]).
  explicit Sampler(SamplerOptions opts);
  // The same with the kernels of one ISA tier (tests compare the tiers).
  Sampler(SamplerOptions opts, const SamplerKernels& kernels);
  // Levels of the sorted walk (docs/design.md, "Sampling"): level j < kLevels - 1 holds the logits
  // within (j + 1) * kLevelBits halvings of the weight below the maximum, not in level j - 1; the
  // last level holds the rest (NaN logits last).
  static constexpr int kLevels = 17;
  static constexpr int kLevelBits = 4;
  // Samples one token and accepts it into the penalty history (and the generated-token counts).
  // allowed: null, or the grammar's mask of n_vocab bits (bit t % 32 of word t / 32 set = token t
  // may be sampled; at least one set bit).
  int32_t sample(const float* logits, int n_vocab, const uint32_t* allowed = nullptr);
  // Check-first's first draw (check_first_exact): a token drawn as sample() draws it without a
  // mask, accepted into nothing (follow it with commit(t) when the grammar takes t, else with
  // sample() under the mask, which draws afresh). -1 when the options are not check_first_exact,
  // or at temperature > 0 when the largest adjusted logit is not finite (+inf, or none above -inf:
  // sample() falls back to the argmax there, which the argument above does not cover): sample
  // under the mask.
  int32_t propose(const float* logits, int n_vocab);
  // Accepts a proposed token into the penalty history, as sample() accepts the token it returns.
  void commit(int32_t token);
  // Adds a token to the penalty history without sampling (a caller feeds the prompt this way, as
  // llama.cpp does).
  void accept(int32_t token);

 private:
  // n_candidates: how many tokens may be drawn at most (the allowed ones under a mask, else n_vocab);
  // it bounds a top-k walk.
  int32_t sample_from(const float* logits, int n_vocab, int n_candidates);
  // top_k < n_vocab: the k best, from as many levels as hold them.
  int32_t sample_top_k(const float* logits, int k);
  // No top-k: weights of the whole vocabulary, its levels sorted as the walk reaches them.
  int32_t sample_all(const float* logits, int n_vocab);
  // Starts the walk over a new row (mx: its largest logit, finite; limit: how far the walk may go).
  void start_walk(int n_vocab, float mx, size_t limit);
  // Sorts levels until order_[0..i] is in final order.
  void ensure_sorted(const float* logits, size_t i);
  // Appends the next level to order_, sorted (only up to limit_).
  void add_level(const float* logits);
  // Top-p and min-p cuts over order_[0, n) and the draw; sum = the candidates' total weight.
  // full_nucleus: apply the top-p loop even at top_p = 1 (the top-k path, as before).
  int32_t cut_and_draw(const float* logits, size_t n, double sum, bool full_nucleus);
  // logits with the mask of step 0 and the adjustments of step 1 applied (a copy; the caller's
  // logits stay untouched), or the caller's logits when none is set.
  const float* penalized(const float* logits, int n_vocab, const uint32_t* allowed);
  bool adjusts_logits() const;

  SamplerOptions opts_;
  const SamplerKernels& kernels_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // candidate token ids, best first; [0, sorted_) is in final order
  std::vector<float> weight_;   // exp((logit - max) / temperature) by token id
  size_t sorted_ = 0;
  size_t limit_ = 0;            // the walk never goes past order_[limit_ - 1]
  int n_vocab_ = 0;
  int next_level_ = 0;          // the next level add_level() appends
  float max_logit_ = 0.0f;
  std::deque<int32_t> history_;  // the last repeat_last_n accepted tokens, oldest first
  std::unordered_map<int32_t, int> generated_;  // token -> times sample() returned it
  std::vector<float> penalized_;
};

// The first index of the largest of x[0, n) (sampler_kernels.h: argmax, at this CPU's tier).
int32_t argmax(const float* x, int n);

}  // namespace mpkv
