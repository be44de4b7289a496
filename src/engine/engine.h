// The serving engine: continuous batching over one model and one KV cache whose byte budget every
// request shares (docs/serving.md). Shape of nano-vllm's engine: sequences (sequence.h), a
// scheduler (scheduler.h: admission, KV reservation, preemption) and this object, which owns the
// forward pass (model_runner.h). Each step() is schedule -> run -> postprocess:
//   0. aborted requests finish first (their pages are freed);
//   1. schedule: the scheduler admits waiting requests, builds one batch under max_batch_tokens
//      and reserves KV room for it, preempting the newest request only when one token cannot fit
//      with every page at its floor (Scheduler::schedule);
//   2. run: one forward pass for the whole batch (forward);
//   3. postprocess: sampling, stop rules and each request's callback (sample_and_emit).
// A request that fits the budget alone never fails for memory; a preempted one is recomputed from
// its prompt and the tokens it had generated (its sampler state is kept, so the continuation is
// the same).
//
// Threads: add_request, abort, metrics and wait_for_work may be called from any thread; step()
// from one thread at a time (the serving loop, or the caller of a synchronous run).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "engine/step_work.h"
#include "grammar/grammar_compiler.h"
#include "kvcache/kv_cache_stats.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {

class PagedKvCache;

class ModelRunner;
class Scheduler;
struct Sequence;
struct BatchEntry;

struct EngineOptions {
  int n_ctx = 4096;             // prompt + generated tokens per request
  int max_seqs = 16;            // requests running at once
  int max_batch_tokens = 512;   // tokens per step: decode tokens plus prefill chunks
  int max_queue = 256;          // requests waiting; add_request beyond it throws QueueFull
  // Admission may promise up to budget x this many bytes (1: a running request never meets a full
  // cache with every page at its floor, so nothing is ever preempted; > 1 admits more requests and
  // preempts when their tokens do not fit after all, as vLLM does).
  double admission_overcommit = 1.0;
  // Prefix cache (docs/serving.md "Prefix cache"): on when the cache has a budget. Floor: the bits
  // cold cached pages shrink to before they are evicted (0: each page's final bits; 16: never
  // shrink, LRU eviction at one precision).
  bool prefix_cache = true;
  int prefix_cache_floor_bits = 0;
  // Constrained rows whose sampling allows it draw without their grammar's mask first and fill the
  // mask only when the grammar refuses the draw (docs/structured_outputs.md, "Masks in the engine").
  // false: every constrained row fills its mask before it samples (tests compare the two).
  bool grammar_check_first = true;
};

// add_request when max_queue requests already wait (an HTTP server answers 503 + Retry-After).
class QueueFull : public Error {
 public:
  using Error::Error;
};

// Decode steps (docs/serving.md "Roofline counters"): engine steps whose batch held decode tokens
// only (no prompt chunk, no recomputation), their tokens, their wall time (scheduling to the
// callbacks) and what their forward calls read and multiplied (step_work.h), summed. /metrics
// exposes them so a report divides: bytes per second against the machine's read bandwidth,
// multiply-adds per second against its int8 peak.
struct DecodeStepTotals {
  uint64_t steps = 0, tokens = 0;
  double seconds = 0.0;
  StepWork work;
};

// A snapshot for /metrics and reports. Totals count since the engine was made.
struct EngineMetrics {
  int running = 0, waiting = 0;
  size_t kv_bytes_used = 0, kv_budget_bytes = 0;  // budget 0: unlimited
  size_t kv_tokens = 0;                           // positions held over all sequences (layer 0)
  double kv_effective_bits = 0.0;  // stored bits per cached K/V element, every byte counted (0: empty)
  uint64_t requests_finished_total = 0, preemptions_total = 0;
  uint64_t prompt_tokens_total = 0, generation_tokens_total = 0, steps_total = 0;
  // Tokens forwarded: decode = a sequence's last sampled token, prefill = everything else (prompt
  // chunks, recomputation after preemption). Per-step differences feed engine/phase_time.h.
  uint64_t forwarded_prefill_tokens_total = 0, forwarded_decode_tokens_total = 0;
  std::map<std::pair<int, int>, uint64_t> page_shrinks;  // (from bits, to bits) -> block halvings
  // Prefix cache: prompt tokens of first admissions and those read from the cache (vLLM's names),
  // and the cache's state (PrefixCacheStats; all zero when it is off).
  bool prefix_cache_on = false;
  uint64_t prefix_cache_queries_total = 0, prefix_cache_hits_total = 0;
  PrefixCacheStats prefix_cache;
  // Structured outputs (docs/structured_outputs.md): requests with a grammar; the masks' cost: rows
  // masked, steps with at least one, and those steps' mask-phase wall time (the rows run in parallel).
  uint64_t constrained_requests_total = 0, grammar_mask_rows_total = 0, grammar_mask_steps_total = 0;
  double grammar_mask_seconds_total = 0.0;
  // Check-first sampling: constrained rows that drew without their mask first, and those whose draw
  // the grammar took (no mask filled); the refused ones are among grammar_mask_rows_total.
  uint64_t grammar_check_first_rows_total = 0, grammar_mask_skipped_rows_total = 0;
  GrammarCompilerStats grammar_compile;  // the compiler's figures, filled by the server's backend
  DecodeStepTotals decode;
};

class Engine {
 public:
  // Validates the options (Error). The cache's plan smoothing is applied to the forward pass once.
  Engine(const Model& model, const Tokenizer& tok, std::unique_ptr<PagedKvCache> cache, EngineOptions opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; returns its id. Throws Error for bad parameters (empty prompt, prompt not
  // shorter than n_ctx, max_tokens < -1 or 0, min_tokens outside 0..max_tokens, bad sampling
  // values, top_logprobs out of range, a request whose footprint alone exceeds the budget) and
  // QueueFull; nothing changes then.
  uint64_t add_request(RequestParams params, OutputCallback on_output);
  // Ends the request at the next step (final event with FinishReason::abort, pages freed).
  // Unknown or finished ids are ignored.
  void abort(uint64_t id);

  // One scheduling step (see the header comment). Returns false when there was nothing to do.
  bool step();
  // Steps until no request waits or runs.
  void run_until_idle();
  // Blocks until a request waits or runs, or the timeout passes; true when there is work.
  bool wait_for_work(std::chrono::milliseconds timeout);
  bool has_work() const;

  EngineMetrics metrics() const;
  const EngineOptions& options() const { return opts_; }
  const PagedKvCache& cache() const { return *cache_; }
  const Tokenizer& tokenizer() const { return tok_; }
  int n_logits() const { return model_.config().n_vocab; }  // the width of a logits row (>= the tokenizer's vocabulary)

 private:
  void validate(const RequestParams& p) const;
  void take_inbox();                           // inbox and aborts -> scheduler (stepping thread)
  void finish(Sequence& s, FinishReason r, RequestOutput out);
  // Returns true when every entry was one decode token (a decode step).
  bool forward(const std::vector<BatchEntry>& batch);
  // A decode step's work (step_work.h), counted after its forward pass: the pages its queries read.
  StepWork decode_work(const std::vector<BatchEntry>& batch) const;
  void sample_and_emit(const std::vector<BatchEntry>& batch);
  // Fills the grammar masks of these sequences (each grammar_active), in parallel.
  void fill_grammar_masks(const std::vector<Sequence*>& seqs);
  // Check-first (docs/structured_outputs.md, "Masks in the engine"): s, when it samples under its
  // grammar this step and may check first (the option, its matcher, check_first_exact of its
  // sampling), draws without the mask: taken (the token in `token`, accepted by the sampler and the
  // matcher), refused (nothing changed: s needs its mask), or not_tried.
  enum class CheckFirst : uint8_t { not_tried, taken, refused };
  CheckFirst sample_check_first(Sequence& s, const float* logits, int32_t& token) const;
  // A sequence's sampled token of this step, with its logprobs when asked for.
  struct Sampled {
    int32_t token = 0;
    std::vector<TokenLogprobs> logprobs;
  };
  void emit_token(Sequence& s, Sampled sampled);  // stop rules, calls back (serially, batch order)
  void publish_metrics();

  const Model& model_;
  const WeightWork weight_work_;  // the weights' share of every decode step's counted work
  const Tokenizer& tok_;
  std::unique_ptr<PagedKvCache> cache_;
  EngineOptions opts_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<Scheduler> sched_;  // stepping thread only (check_fits_alone: any)
  std::vector<float> logits_;
  EngineMetrics totals_;              // stepping thread's counters, copied to snapshot_

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;
  uint64_t next_id_ = 1;
  std::vector<std::unique_ptr<Sequence>> inbox_;  // added, not yet seen by step()
  std::vector<uint64_t> aborts_;
  EngineMetrics snapshot_;
};

}  // namespace mpkv
