// The KV budget of a run whose sequences have a known length (ppl and eval windows).
//
// A progressive plan shrinks pages only under a budget; without --kv-budget-mib, make_kv_cache gives
// a plan file the budget it was solved for (solve.budget_bytes: one sequence of solve.max_len
// tokens), and `--kv-method progressive` none. A run of shorter sequences (ppl -c 512 with a plan
// solved for 4096 tokens) never fills that budget: its pages stay at 16 bits and it would be compared,
// as "3 bits", with fixed plans holding a fifth of its bytes. run_budget_mib gives a progressive plan
// without a budget what n_seqs sequences of max_len tokens need with every full page at its final
// bits (KvByteModel::sequence_bytes_bound): the budget the plan would be solved for at that length.
// What it still holds above a fixed plan of the same finals is each block's newest page at 16 bits
// (docs/calibration.md, "Equal bytes at a shorter length").
#pragma once
#include "kvcache/kv_cache_factory.h"

namespace mpkv {

// o.budget_mib when it is set or the plan is not progressive; else the bytes above in MiB (rounded
// up, so make_kv_cache's byte count is not below them). Error as make_kv_plan, or when n_seqs or
// max_len is below 1.
double run_budget_mib(const KvCacheOptions& o, const KvDims& dims, int n_seqs, int max_len);

}  // namespace mpkv
