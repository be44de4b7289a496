// The engine's queues (engine.h): who waits, who runs, and what goes into the next step's batch.
// Plain bookkeeping on the stepping thread; the engine does the KV reservations and the forward.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/sequence.h"

namespace mpkv {

// One sequence's share of a step: its next n_tokens uncached tokens.
struct BatchEntry {
  Sequence* seq = nullptr;
  int n_tokens = 0;  // 0: dropped (preempted while the step was being prepared)
};

class Scheduler {
 public:
  // footprint(n): bytes one sequence needs to grow to n positions (PagedKvCache::sequence_bytes_bound);
  // admit_bytes: what the projected footprints of running sequences may add up to (0: unlimited);
  // available(): bytes the cache could hand out now, shrinking every page to its floor
  // (PagedKvCache::available_bytes).
  Scheduler(int max_seqs, size_t admit_bytes, std::function<size_t(int)> footprint, std::function<size_t()> available,
            int n_ctx);

  // Queues s behind every waiting sequence of equal or lower priority value (RequestParams::priority).
  void add(std::unique_ptr<Sequence> s);
  // Moves waiting sequences to running in queue order (priority, then oldest first) while they
  // fit (engine.h, step 3): their projection within admit_bytes, and room in the cache now for the
  // tokens they already have plus one (so a preempted sequence is not taken back before the cache can hold it again, which
  // would only preempt it again). Stops at the first that does not fit (no overtaking). Returns the
  // newly admitted ones.
  std::vector<Sequence*> admit();
  // Decode tokens of every running sequence that has finished prefilling, oldest first, then
  // prefill chunks, oldest first, until max_tokens tokens are in the batch.
  std::vector<BatchEntry> plan_batch(int max_tokens) const;
  // Moves the newest running sequence to the front of the waiting queue (n_cached = 0) and returns
  // it; the caller frees its cache slot. Null when nothing runs.
  Sequence* preempt_newest();
  // Removes a running or waiting sequence and returns ownership.
  std::unique_ptr<Sequence> take(Sequence* s);
  Sequence* find(uint64_t id);
  // Running and waiting sequences with abort_requested set.
  std::vector<Sequence*> aborted() const;

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  bool idle() const { return waiting_.empty() && running_.empty(); }

 private:
  size_t projected(const Sequence& s) const { return footprint_(s.max_positions(n_ctx_)); }

  int max_seqs_;
  size_t admit_bytes_;
  std::function<size_t(int)> footprint_;
  std::function<size_t()> available_;
  int n_ctx_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // in order of admission
  size_t running_bytes_ = 0;                        // sum of projected() over running_
};

}  // namespace mpkv
