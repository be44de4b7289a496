#include "engine/model_runner.h"

#include <algorithm>
#include <cstring>

#include "engine/reserve_halving.h"
#include "util/error.h"

namespace mpkv {

ModelRunner::ModelRunner(const Model& model, KvCache& cache) : ModelRunner(model, cache, nullptr) {}

ModelRunner::ModelRunner(const Model& model, KvCache& cache, KvMemory* memory)
    : model_(model), cache_(cache), memory_(memory), fwd_(model) {
  if (const auto* lambda = cache.key_smoothing()) fwd_.set_qk_smoothing(*lambda);
}

void ModelRunner::run(const std::vector<BatchToken>& batch, std::vector<float>& logits) { fwd_.run(cache_, batch, logits); }

size_t ModelRunner::prefill(int seq, std::span<const int32_t> tokens, int pos0, int max_chunk, LogitSpan want,
                            const LogitRowsFn& on_rows) {
  MPKV_CHECK(max_chunk > 0, "prefill chunk must be positive");
  size_t done = 0;
  while (done < tokens.size()) {
    const int chunk = (int)std::min(tokens.size() - done, (size_t)max_chunk);
    const int n = memory_ ? reserve_halving(*memory_, seq, chunk) : chunk;
    if (n == 0) return done;
    batch_.clear();
    size_t first_row = SIZE_MAX, n_rows = 0;
    for (int i = 0; i < n; ++i) {
      const size_t k = done + i;
      const bool row = k >= want.begin && k < want.end;
      if (row && first_row == SIZE_MAX) first_row = k;
      n_rows += row;
      batch_.push_back({tokens[k], pos0 + (int)k, seq, row});
    }
    fwd_.run(cache_, batch_, logits_);
    if (n_rows > 0 && on_rows) on_rows(first_row, n_rows, logits_.data());
    done += n;
  }
  return done;
}

}  // namespace mpkv
