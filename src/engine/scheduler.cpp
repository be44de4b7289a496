#include "engine/scheduler.h"

#include <algorithm>
#include <climits>

#include "engine/reserve_halving.h"
#include "util/error.h"

namespace mpkv {

Scheduler::Scheduler(KvMemory& kv, SchedulerOptions o) : kv_(kv), opts_(o) {
  const size_t budget = kv_.budget_bytes();
  MPKV_CHECK(budget == 0 || footprint(1) <= budget, "engine: the KV budget cannot hold even one token of one sequence");
  admit_bytes_ = budget == 0 ? 0 : (size_t)((double)budget * opts_.admission_overcommit);
}

void Scheduler::add(std::unique_ptr<Sequence> s) {
  const int p = s->params.priority;
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [p](const auto& w) { return w->params.priority > p; });
  waiting_.insert(at, std::move(s));
}

void Scheduler::check_fits_alone(int n) const {
  const size_t budget = kv_.budget_bytes();
  MPKV_CHECK(budget == 0 || footprint(n) <= budget,
             "the request needs up to " + std::to_string(footprint(n)) + " KV bytes for " + std::to_string(n) +
                 " tokens, more than the whole KV budget (" + std::to_string(budget) +
                 " bytes); lower max_tokens or shorten the prompt");
}

// Whether s may join the running sequences now (the admission rules of scheduler.h, step 1).
bool Scheduler::fits_now(const Sequence& s, const PrefixMatch& m) const {
  if (running_.empty()) return true;  // the oldest always starts alone (check_fits_alone let it in)
  const size_t need = projected(s, m.tokens);
  if (admit_bytes_ > 0 && running_bytes_ + kv_.prefix_pinned_bytes() + m.unpinned_bytes + need > admit_bytes_)
    return false;
  // Room now for its tokens plus one; matched blocks that were cold stop counting as evictable.
  const int n_now = std::min((int)s.tokens.size() + 1, opts_.n_ctx);
  const size_t now = footprint(n_now) - cached_part(m.tokens) + m.cold_bytes;
  return now <= kv_.available_bytes();
}

// s leaves the queue: a KV slot, what the prefix cache holds of its tokens, its projected bytes.
void Scheduler::start(Sequence& s) {
  s.status = SeqStatus::running;
  s.cache_slot = next_slot_;
  next_slot_ = next_slot_ == INT32_MAX ? 0 : next_slot_ + 1;
  // A request that wants its prompt's logprobs computes every position (vLLM's rule).
  s.n_cached = s.needs_prompt_logits() ? 0 : kv_.attach_prefix(s.cache_slot, s.tokens.data(), (int)s.tokens.size());
  s.projected_bytes = projected(s, s.n_cached);
  running_bytes_ += s.projected_bytes;
  if (!s.scheduled_once) {
    s.scheduled_once = true;
    s.stats.queue_seconds = s.seconds_since_arrival();
    s.stats.n_cached_prompt_tokens = std::min(s.n_cached, s.n_prompt);
    if (kv_.prefix_cache_enabled()) {
      prefix_queries_ += (uint64_t)s.n_prompt;
      prefix_hits_ += (uint64_t)s.stats.n_cached_prompt_tokens;
    }
  }
}

void Scheduler::admit() {
  while (!waiting_.empty() && (int)running_.size() < opts_.max_seqs) {
    Sequence& s = *waiting_.front();
    const PrefixMatch m =
        s.needs_prompt_logits() ? PrefixMatch{} : kv_.prefix_match(s.tokens.data(), (int)s.tokens.size());
    if (!fits_now(s, m)) break;
    start(s);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
}

std::vector<BatchEntry> Scheduler::plan_batch() const {
  std::vector<BatchEntry> batch;
  int used = 0;
  for (const auto& s : running_) {
    if (used >= opts_.max_batch_tokens) break;
    if (s->n_uncached() == 1) {
      batch.push_back({s.get(), 1});
      ++used;
    }
  }
  for (const auto& s : running_) {
    if (used >= opts_.max_batch_tokens) break;
    if (!s->prefilling()) continue;
    const int n = std::min(s->n_uncached(), opts_.max_batch_tokens - used);
    batch.push_back({s.get(), n});
    used += n;
  }
  return batch;
}

bool Scheduler::reserve(std::vector<BatchEntry>& entries) {
  for (BatchEntry& e : entries) {
    while (e.n_tokens > 0) {
      // A prefill chunk that does not fit is halved first (fewer fresh pages at once).
      if (const int n = reserve_halving(kv_, e.seq->cache_slot, e.n_tokens)) {
        e.n_tokens = n;
        break;
      }
      // Every page is at its floor: the newest running sequence gives its pages back.
      MPKV_ASSERT(running_.size() > 1, "a request that fits the KV budget alone cannot reserve one token");
      const Sequence* victim = running_.back().get();
      preempt_newest();
      for (BatchEntry& o : entries)
        if (o.seq == victim) o.n_tokens = 0;
    }
  }
  std::erase_if(entries, [](const BatchEntry& e) { return e.n_tokens == 0; });
  return !entries.empty();
}

void Scheduler::preempt_newest() {
  std::unique_ptr<Sequence> s = std::move(running_.back());
  running_.pop_back();
  running_bytes_ -= s->projected_bytes;
  kv_.remove(s->cache_slot);
  s->cache_slot = -1;
  s->status = SeqStatus::waiting;
  s->n_cached = 0;
  s->stats.n_preemptions++;
  preemptions_++;
  waiting_.push_front(std::move(s));
}

std::vector<BatchEntry> Scheduler::schedule() {
  admit();
  std::vector<BatchEntry> batch = plan_batch();
  if (!batch.empty() && !reserve(batch)) batch.clear();
  return batch;
}

void Scheduler::publish(const std::vector<BatchEntry>& batch) {
  if (!kv_.prefix_cache_enabled()) return;
  for (const BatchEntry& e : batch) kv_.publish_prefix(e.seq->cache_slot, e.seq->tokens.data(), e.seq->n_cached);
}

std::unique_ptr<Sequence> Scheduler::finish(Sequence* s) {
  if (s->cache_slot >= 0) kv_.remove(s->cache_slot);
  auto match = [s](const std::unique_ptr<Sequence>& p) { return p.get() == s; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    std::unique_ptr<Sequence> out = std::move(*it);
    running_.erase(it);
    running_bytes_ -= out->projected_bytes;
    return out;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), match); it != waiting_.end()) {
    std::unique_ptr<Sequence> out = std::move(*it);
    waiting_.erase(it);
    return out;
  }
  MPKV_ASSERT(false, "scheduler: sequence not queued");
  return nullptr;
}

Sequence* Scheduler::find(uint64_t id) {
  for (const auto& s : running_)
    if (s->id == id) return s.get();
  for (const auto& s : waiting_)
    if (s->id == id) return s.get();
  return nullptr;
}

std::vector<Sequence*> Scheduler::aborted() const {
  std::vector<Sequence*> out;
  for (const auto& s : running_)
    if (s->abort_requested) out.push_back(s.get());
  for (const auto& s : waiting_)
    if (s->abort_requested) out.push_back(s.get());
  return out;
}

}  // namespace mpkv
