// Next-token sampling: greedy at temperature 0, else temperature + top-k + top-p (nucleus).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace mpkv {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy (argmax)
  float top_p = 0.95f;       // keep the smallest set of tokens whose probability reaches top_p
  int top_k = 40;            // 0 = no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions opts);
  int32_t sample(const float* logits, int n_vocab);

 private:
  SamplerOptions opts_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(const float* x, int n);

}  // namespace mpkv
