#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mpkv {

TokenLogprobs token_logprobs(const float* logits, int n_vocab, int32_t sampled, int n_top) {
  float mx = logits[0];
  for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp((double)logits[i] - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprobs r;
  r.sampled = {sampled, (float)(logits[sampled] - log_z)};
  n_top = std::clamp(n_top, 0, n_vocab);
  if (n_top == 0) return r;
  std::vector<int32_t> ids(n_vocab);
  for (int i = 0; i < n_vocab; ++i) ids[i] = i;
  std::partial_sort(ids.begin(), ids.begin() + n_top, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (int i = 0; i < n_top; ++i) r.top.push_back({ids[i], (float)(logits[ids[i]] - log_z)});
  return r;
}

}  // namespace mpkv
