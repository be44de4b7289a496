#include "engine/request.h"

namespace mpkv {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::context: return "context";
    case FinishReason::abort: return "abort";
  }
  return "?";
}

PromptCheck check_prompt(const std::vector<int32_t>& prompt, int n_ctx, int n_vocab) {
  using P = PromptCheck::Problem;
  if (prompt.empty()) return {P::empty};
  if ((int64_t)prompt.size() >= n_ctx) return {P::too_long};
  for (int32_t t : prompt)
    if (!token_id_valid(t, n_vocab)) return {P::bad_token, t};
  return {};
}

}  // namespace mpkv
