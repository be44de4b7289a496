// One method over a task file through the serving engine (engine/engine.h): the same paged caches,
// kernels and scheduler as `mpkv serve`, greedy decoding, each item scored by its answer rule
// (docs/accuracy_tasks.md "Harness").
//
// Equal memory: every budgeted method gets, per sequence, B(n) = budget.sequence_bytes_bound(n) of a
// reference plan (KvByteModel, n = prompt tokens + max_tokens). Items run in batches of `parallel`
// on a fresh engine whose cache budget is the sum of the batch's B(n); a method whose own bound is
// above B(n) gets its own bound instead (over_budget counts those items). f16 runs unbudgeted, with
// the whole prompt (PromptPolicy::full: the ceiling) or with the prompt cut at the prompt level so
// its f16 bound fits B(n):
//   streaming  the first `sink` tokens and the most recent ones (StreamingLLM's sink + window,
//              applied once to the prompt; positions are renumbered contiguously, as StreamingLLM
//              numbers positions inside its cache; generated tokens are not evicted)
//   truncate   the most recent tokens only (the BOS token kept when the tokenizer adds one)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/task_items.h"
#include "kvcache/kv_byte_model.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {

enum class PromptPolicy { full, streaming, truncate };
const char* prompt_policy_name(PromptPolicy p);  // "full", "streaming", "truncate"
PromptPolicy parse_prompt_policy(const std::string& s);  // input error for any other name

struct TaskMethod {
  std::string label;  // "kivi-2", "f16-evict"
  double bits = 16;   // nominal average bits
  KvCacheOptions kv;
  PromptPolicy policy = PromptPolicy::full;
  bool budgeted = false;  // under the reference budget (false for f16 rows)
};

// Where a method's run stands, after each batch of items (for a caller's progress line).
struct TaskProgress {
  size_t done = 0, total = 0;  // items finished / in the file
  int right = 0;               // of the finished ones
  double seconds = 0;          // since the method's first batch began
};

struct TaskRunOptions {
  int n_ctx = 0;        // engine context; every item's prompt + max_tokens must fit
  int parallel = 1;     // items decoding at once
  int threads = 1;      // recorded only
  int sink = 4;         // tokens PromptPolicy::streaming keeps at the start
  std::function<void(const TaskProgress&)> on_batch;  // optional: called after every batch
};

struct ItemOutcome {
  std::string generated;
  bool correct = false;
  int prompt_tokens = 0;  // the item's whole prompt
  int kept_tokens = 0;    // what the method's cache saw of it
  int generated_tokens = 0;
  size_t budget_bytes = 0;  // B(n) (0: no budget)
  bool over_budget = false;
};

struct TaskMethodResult {
  std::vector<ItemOutcome> items;
  double seconds = 0;
  size_t peak_bytes = 0;       // the largest per-batch pool peak
  double peak_bits_per_elem = 0;  // mean over batches of peak bytes x 8 / (K/V elements of the batch's tokens)
  // The same over the K/V elements of the whole context (every item's full prompt + generated
  // tokens): the memory per element of the task as posed; below peak_bits_per_elem for cut prompts.
  double context_bits_per_elem = 0;
};

// Tokens of the f16 cache's bound that fit `bytes` (the largest t with sequence_bytes_bound(t) <= bytes; 0 if none).
int f16_tokens_within(const KvByteModel& f16, size_t bytes);
// The prompt a policy keeps when only `keep` tokens fit (full: the prompt). `keep_first`: leading
// tokens always kept by truncate (the BOS token).
std::vector<int32_t> fit_prompt(const std::vector<int32_t>& prompt, PromptPolicy policy, int keep, int sink,
                                int keep_first);

// Runs every item (prompts[i] = items[i]'s tokens). `budget` is the reference byte model (used
// for budgeted methods and for the f16 prompt cuts). Error when an item cannot be served (too
// long for n_ctx, a budget below the method's minimum, a prompt cut leaving no tokens).
TaskMethodResult run_task_method(const Model& model, const Tokenizer& tok, const std::vector<TaskItem>& items,
                                 const std::vector<std::vector<int32_t>>& prompts, const TaskMethod& method,
                                 const KvByteModel& budget, const TaskRunOptions& opts);

}  // namespace mpkv
