// The three measurements of `mpkv eval` (docs/algorithms.md §9; every row says its protocol):
//
//   decode        W windows of n_ctx text tokens decoded token by token through each method's real
//                 cache next to the 16-bit reference (lockstep_decoder.h)
//   prefill-fake  each window in one teacher-forced pass with K/V quantized and dequantized on
//                 append at the final bits (fake_quant_kv_cache.h), next to a 16-bit pass
//   drift         a greedy generation with the 16-bit cache, teacher-forced through each method's
//                 cache: KL and top-1 agreement against position
//
// Windows follow `mpkv ppl` (llama.cpp's protocol): window w is tokens [w*n_ctx, (w+1)*n_ctx), its
// first token replaced by BOS when the model adds one; the logits at positions [n_ctx/2, n_ctx-1)
// are scored against the next token. KL(reference || method) and top-1 agreement are taken at the
// same positions.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/block_bootstrap.h"
#include "eval/lockstep_decoder.h"

namespace mpkv {

struct TextEvalOptions {
  int n_ctx = 2048;
  int windows = 2;
  bool add_bos = false;
  int32_t bos = -1;
  bool progress = true;
  BootstrapOptions bootstrap;         // the intervals of every row (bootstrap.block positions per block)
  std::vector<int> sensitivity_blocks{1, 16, 64, 256, 1024};  // extra block lengths, for the JSON only
};

// A row's intervals at one block length (block_bootstrap.h).
struct RowIntervals {
  int block = 0;
  Interval ppl_delta_pct, kl_mean;
};

struct EvalRow {
  std::string method, label, protocol;
  double bits = 16;                 // nominal average final bits
  double ppl = 0, ppl_delta_pct = 0;  // delta against the same protocol's 16-bit row
  double kl_mean = 0, kl_p99 = 0, top1 = 1;
  double stored_bits_per_element = -1;  // decode only: every byte the cache holds at the end * 8 / elements
                                        // it must hold (sliding-window layers: their last W positions)
  double bytes_per_token = -1;          // decode only: same bytes / tokens held
  int64_t scored = 0;
  double seconds = 0;                   // the protocol's wall time (all methods together for decode)
  // Block bootstrap 95% intervals of ppl_delta_pct (paired with the 16-bit row on the same positions)
  // and kl_mean: `ci` at TextEvalOptions::bootstrap.block, `ci_by_block` at sensitivity_blocks.
  RowIntervals ci;
  std::vector<RowIntervals> ci_by_block;
  int64_t ci_blocks = 0;                // blocks resampled at bootstrap.block
};

// Throws Error when the text has fewer than windows * n_ctx tokens. The reference row (method
// "f16") comes first; `methods` must not contain f16 (the reference is it).
std::vector<EvalRow> eval_decode(const Model& model, const std::vector<int32_t>& tokens,
                                 const std::vector<EvalMethod>& methods, const TextEvalOptions& o);
std::vector<EvalRow> eval_prefill_fake(const Model& model, const std::vector<int32_t>& tokens,
                                       const std::vector<EvalMethod>& methods, const TextEvalOptions& o);

struct DriftOptions {
  int n_tokens = 4096;  // generated tokens compared
  int bucket = 256;     // positions per point of the curves
  bool progress = true;
};
struct DriftCurve {
  std::string label;
  std::vector<double> kl_mean, top1;  // per bucket of generated positions
  double kl_mean_all = 0, top1_all = 0, kl_p99_all = 0;
};
struct DriftResult {
  int prompt_tokens = 0, tokens = 0, bucket = 0;
  std::vector<int> bucket_start;      // first generated position (0-based, after the prompt) of each bucket
  std::vector<int32_t> generated;     // the reference's greedy tokens
  std::vector<DriftCurve> methods;
  double seconds = 0;
};
// The reference generates greedily from `prompt`, never choosing a token for which `excluded`
// is true (end-of-generation tokens, so the text runs to n_tokens); each method is teacher-forced
// on the same tokens. The comparison at generated position i uses the logits that predict it.
DriftResult eval_drift(const Model& model, const std::vector<int32_t>& prompt, const std::vector<EvalMethod>& methods,
                       const DriftOptions& o, const std::function<bool(int32_t)>& excluded);

}  // namespace mpkv
