#include "kvcache/run_budget.h"

#include "kvcache/kv_byte_model.h"
#include "util/error.h"

namespace mpkv {

double run_budget_mib(const KvCacheOptions& o, const KvDims& dims, int n_seqs, int max_len) {
  MPKV_CHECK(n_seqs >= 1 && max_len >= 1, "KV run budget: need at least one sequence of one token");
  if (o.budget_mib > 0) return o.budget_mib;
  const KvPlan plan = make_kv_plan(o, dims);
  if (!plan.progressive) return o.budget_mib;
  const double bytes = (double)n_seqs * (double)KvByteModel(dims, plan).sequence_bytes_bound(max_len);
  return bytes / (1024.0 * 1024.0) + 1e-6;  // make_kv_cache rounds MiB to bytes: stay above
}

}  // namespace mpkv
