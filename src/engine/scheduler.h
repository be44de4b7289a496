// The engine's scheduler (engine.h): who waits, who runs, and what goes into the next step's
// batch. It owns admission, KV reservation and preemption, talking to the cache only through
// KvMemory (kvcache/kv_memory.h: the byte model, reserve, remove). This file is where a request is
// admitted. Stepping thread only, except check_fits_alone.
//
// Prefix cache (docs/serving.md "Prefix cache"): an admitted sequence first takes what the cache
// holds of its tokens (KvMemory::attach_prefix: those positions count as cached), and after every
// forward pass publish() offers the cache each batch entry's newly full pages.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "kvcache/kv_memory.h"

namespace mpkv {

// One sequence's share of a step: its next n_tokens uncached tokens.
struct BatchEntry {
  Sequence* seq = nullptr;
  int n_tokens = 0;
};

struct SchedulerOptions {
  int max_seqs = 16;
  int max_batch_tokens = 512;
  int n_ctx = 4096;
  double admission_overcommit = 1.0;  // EngineOptions::admission_overcommit
};

class Scheduler {
 public:
  // Error when the budget cannot hold even one token of one sequence.
  Scheduler(KvMemory& kv, SchedulerOptions o);

  // Error unless a request reaching n positions fits the whole budget alone (then it never fails
  // for memory). Reads only the byte model and the budget: safe from any thread.
  void check_fits_alone(int n_positions) const;

  // Queues s behind every waiting sequence of equal or lower priority value (RequestParams::priority).
  void add(std::unique_ptr<Sequence> s);
  // The next step's batch, with KV room reserved for every entry; empty: nothing can run.
  //   1. admits waiting sequences in queue order (priority, then oldest first) while fewer than max_seqs run and the projected
  //      footprint of every running sequence plus the new one, each at its plan's final bits for
  //      min(prompt + max_tokens, n_ctx) positions (KvByteModel::sequence_bytes_bound) less the
  //      pages it reads from the prefix cache (counted once, for all readers: prefix_pinned_bytes),
  //      stays within budget x admission_overcommit, and the cache has room now for the tokens it
  //      already has plus one (so a preempted sequence is not taken back before the cache can hold
  //      it again). Stops at the first that does not fit (no overtaking); the oldest is always
  //      admitted when nothing runs. Each admitted sequence gets a KV slot and its cached prefix.
  //   2. takes one decode token of every running sequence that has finished prefilling, then
  //      prefill chunks, oldest first, until max_batch_tokens tokens are in the batch;
  //   3. reserves KV room for each entry (the cache shrinks pages first; a prefill chunk that does
  //      not fit is halved); only when one token cannot fit with every page at its floor is the
  //      newest running sequence preempted: its pages are freed and it goes back to the front of
  //      the queue, to be recomputed from its prompt and the tokens it had generated.
  std::vector<BatchEntry> schedule();
  // Offers the KV cache the full pages of every entry after a forward pass (prefix cache).
  void publish(const std::vector<BatchEntry>& batch);
  // Removes a running or waiting sequence, frees its KV pages and returns ownership.
  std::unique_ptr<Sequence> finish(Sequence* s);
  Sequence* find(uint64_t id);
  // Running and waiting sequences with abort_requested set.
  std::vector<Sequence*> aborted() const;

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  uint64_t preemptions_total() const { return preemptions_; }
  // Prompt tokens of first admissions, and those read from the prefix cache (vLLM's
  // prefix_cache_queries / prefix_cache_hits).
  uint64_t prefix_queries_total() const { return prefix_queries_; }
  uint64_t prefix_hits_total() const { return prefix_hits_; }

 private:
  // What a sequence of n positions may hold: its pages and buffers, and with the prefix cache on the
  // block records it publishes.
  size_t footprint(int n_positions) const {
    const KvByteModel& m = kv_.byte_model();
    return m.sequence_bytes_bound(n_positions) + (kv_.prefix_cache_enabled() ? m.prefix_records_bound(n_positions) : 0);
  }
  // What the first `cached` positions read from the prefix cache take out of footprint(): their
  // pages and records, counted once for all readers in prefix_pinned_bytes().
  size_t cached_part(int cached) const {
    const KvByteModel& m = kv_.byte_model();
    return cached == 0 ? 0 : m.prefix_pages_bound(cached) + m.prefix_records_bound(cached);
  }
  // Admission's bytes for s when its first `cached` positions come from the prefix cache.
  size_t projected(const Sequence& s, int cached) const {
    return footprint(s.max_positions(opts_.n_ctx)) - cached_part(cached);
  }
  bool fits_now(const Sequence& s, const PrefixMatch& m) const;
  void start(Sequence& s);
  void admit();
  std::vector<BatchEntry> plan_batch() const;
  bool reserve(std::vector<BatchEntry>& entries);
  void preempt_newest();

  KvMemory& kv_;
  SchedulerOptions opts_;
  size_t admit_bytes_;  // what projected footprints of running sequences may add up to (0: unlimited)
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in order of admission
  size_t running_bytes_ = 0;                        // sum of projected() over running_
  int next_slot_ = 0;                               // KV sequence ids, one per admission
  uint64_t preemptions_ = 0;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace mpkv
