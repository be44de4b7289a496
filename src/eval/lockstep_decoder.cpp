#include "eval/lockstep_decoder.h"

#include <algorithm>
#include <cstring>

#include "kvcache/run_budget.h"
#include "util/error.h"

namespace mpkv {

LockstepDecoder::LockstepDecoder(const Model& model, std::vector<EvalMethod> methods, int n_streams, int max_len,
                                 int caches_per_call)
    : model_(model), methods_(std::move(methods)), n_streams_(n_streams), max_len_(max_len),
      caches_per_call_(caches_per_call), routed_(model.config().kv_dims()), fwd_(model) {
  MPKV_CHECK(n_streams >= 1 && max_len >= 1, "eval: need at least one stream of one token");
  MPKV_CHECK(caches_per_call >= 0, "eval: caches per forward call must be >= 0 (0: all of them)");
  const KvDims dims = model.config().kv_dims();
  KvCacheOptions ref;
  ref.method = KvMethod::f16;
  ref_ = make_kv_cache(ref, dims);
  for (int w = 0; w < n_streams; ++w) routed_.route(w, ref_.get(), w);
  for (size_t m = 0; m < methods_.size(); ++m) {
    KvCacheOptions& kv = methods_[m].kv;
    // A progressive plan without a budget: just enough for every stream to reach max_len with its
    // full pages at their final bits (kvcache/run_budget.h).
    kv.budget_mib = run_budget_mib(kv, dims, n_streams, max_len);
    std::unique_ptr<PagedKvCache> c = make_kv_cache(kv, dims);  // validates the options
    for (int w = 0; w < n_streams; ++w)
      routed_.route((int)(m + 1) * n_streams + w, c.get(), w, c->plan().smoothing);
    caches_.push_back(std::move(c));
  }
}

void LockstepDecoder::step(const std::vector<int32_t>& tokens, int pos, bool want_logits, std::vector<float>& logits) {
  MPKV_ASSERT((int)tokens.size() == n_streams_, "eval: one token per stream expected");
  MPKV_CHECK(pos < max_len_, "eval: position " + std::to_string(pos) + " is past max_len " + std::to_string(max_len_));
  const int n_seq = (1 + n_methods()) * n_streams_;
  const int n_vocab = model_.config().n_vocab;
  if (want_logits) logits.resize((size_t)n_seq * n_vocab);
  // Whole caches per call: all streams of a cache reserve their position before any of them
  // attends, as a server's step does (Scheduler::schedule), whatever the call size.
  const int group = (caches_per_call_ > 0 ? caches_per_call_ : 1 + n_methods()) * n_streams_;
  for (int s0 = 0; s0 < n_seq; s0 += group) {
    const int s1 = std::min(n_seq, s0 + group);
    std::vector<BatchToken> batch;
    for (int s = s0; s < s1; ++s) {
      if (!routed_.reserve(s, 1)) {
        const int m = s / n_streams_ - 1;
        throw Error("eval: the KV budget of " + (m < 0 ? std::string("the reference") : methods_[m].label) +
                   " cannot hold position " + std::to_string(pos) + " of stream " + std::to_string(s % n_streams_));
      }
      batch.push_back({tokens[s % n_streams_], pos, s, want_logits});
    }
    fwd_.run(routed_, batch, part_);
    if (want_logits) std::memcpy(logits.data() + (size_t)s0 * n_vocab, part_.data(), sizeof(float) * part_.size());
  }
}

}  // namespace mpkv
