// What a forward call reads and multiplies, counted from the model's matrices and the cache's pages
// (docs/results/speed.md "Roofline"; docs/serving.md "Roofline counters"): the roofline of a decode
// step. `mpkv bench` (tools/bench_roofline.h) and the serving engine's decode-step counters
// (engine.h, EngineMetrics::decode) both count with these functions, so a served figure and a
// benchmark figure are divided by the same bytes and multiply-adds.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "model/kv_cache.h"
#include "model/model.h"

namespace mpkv {

class PagedKvCache;

// Bytes and int8 multiply-adds; a sum of steps is a StepWork too.
struct StepWork {
  uint64_t weight_bytes = 0;                   // GGUF bytes of the matrices a forward call multiplies
  std::map<int, uint64_t> kv_page_bytes_by_bits;  // pages' blocks read, by current bits (codes + scales, or fp16)
  uint64_t kv_fp16_row_bytes = 0;              // fp16 sink and window rows read (K and V)
  uint64_t macs = 0;                           // weight rows x columns per token + attention's products

  uint64_t kv_bytes() const;
  // Pages' bytes by bits with the fp16 rows counted under 16 (`mpkv bench`'s "KV by width").
  std::map<int, uint64_t> kv_bytes_by_bits_with_rows() const;
  StepWork& operator+=(const StepWork& o);
};

// The weights' share of a forward call, a property of the model (counted once, not per step):
// bytes of every matrix of every layer (Q, K, V, O, gate, up, down) and the output head, read once
// per forward call (the embedding table's one row per token is left out), and the multiply-adds of
// one token, rows x columns of those matrices.
struct WeightWork {
  uint64_t bytes = 0, macs_per_token = 0;
};
WeightWork weight_work(const Model& model);
// Attention multiply-adds of one query at position `pos`, every layer: each query head scores its
// visible rows (min(window, pos + 1), or pos + 1 for a global layer) and sums their values.
uint64_t attention_macs(const KvDims& dims, int pos);
// Adds what one query of sequence `seq` reads from the cache (PagedKvCache::read_bytes: every live
// page's blocks at their current bits, the open page's filled share, and the fp16 sink and window
// rows) to w.
void add_kv_read(StepWork& w, const PagedKvCache& cache, int seq);

// One forward call of decode tokens, each of sequence `seq` at position `pos` (already appended):
// the weights once, and per token its multiply-adds and its attention's KV reads.
struct DecodeToken {
  int seq, pos;
};
StepWork decode_call_work(const WeightWork& weights, const PagedKvCache& cache, const std::vector<DecodeToken>& tokens);

}  // namespace mpkv
