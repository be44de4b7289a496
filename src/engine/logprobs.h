// Log-probabilities for OpenAI's logprobs / top_logprobs (engine/request.h): log-softmax of the
// raw logits (temperature 1, before top-k / top-p), computed in double.
#pragma once
#include <cstdint>

#include "engine/request.h"

namespace mpkv {

// The sampled token's logprob and the n_top most likely tokens (ties: lower id first).
TokenLogprobs token_logprobs(const float* logits, int n_vocab, int32_t sampled, int n_top);

}  // namespace mpkv
