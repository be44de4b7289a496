#include "engine/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace mpkv {

Scheduler::Scheduler(int max_seqs, size_t admit_bytes, std::function<size_t(int)> footprint,
                     std::function<size_t()> available, int n_ctx)
    : max_seqs_(max_seqs), admit_bytes_(admit_bytes), footprint_(std::move(footprint)), available_(std::move(available)),
      n_ctx_(n_ctx) {}

void Scheduler::add(std::unique_ptr<Sequence> s) {
  const int p = s->params.priority;
  auto at = std::find_if(waiting_.begin(), waiting_.end(), [p](const auto& w) { return w->params.priority > p; });
  waiting_.insert(at, std::move(s));
}

std::vector<Sequence*> Scheduler::admit() {
  std::vector<Sequence*> out;
  while (!waiting_.empty() && (int)running_.size() < max_seqs_) {
    Sequence& s = *waiting_.front();
    const size_t need = projected(s);
    // The oldest waiting request always starts when nothing runs (add_request checked it fits alone).
    if (!running_.empty() && admit_bytes_ > 0 && running_bytes_ + need > admit_bytes_) break;
    if (!running_.empty() && footprint_(std::min((int)s.tokens.size() + 1, n_ctx_)) > available_()) break;
    running_bytes_ += need;
    s.status = SeqStatus::running;
    out.push_back(&s);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  return out;
}

std::vector<BatchEntry> Scheduler::plan_batch(int max_tokens) const {
  std::vector<BatchEntry> batch;
  int used = 0;
  for (const auto& s : running_) {
    if (used >= max_tokens) break;
    if (s->n_uncached() == 1) {
      batch.push_back({s.get(), 1});
      ++used;
    }
  }
  for (const auto& s : running_) {
    if (used >= max_tokens) break;
    if (!s->prefilling()) continue;
    const int n = std::min(s->n_uncached(), max_tokens - used);
    batch.push_back({s.get(), n});
    used += n;
  }
  return batch;
}

Sequence* Scheduler::preempt_newest() {
  if (running_.empty()) return nullptr;
  std::unique_ptr<Sequence> s = std::move(running_.back());
  running_.pop_back();
  running_bytes_ -= projected(*s);
  s->status = SeqStatus::waiting;
  s->n_cached = 0;
  s->stats.n_preemptions++;
  waiting_.push_front(std::move(s));
  return waiting_.front().get();
}

std::unique_ptr<Sequence> Scheduler::take(Sequence* s) {
  auto match = [s](const std::unique_ptr<Sequence>& p) { return p.get() == s; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    std::unique_ptr<Sequence> out = std::move(*it);
    running_.erase(it);
    running_bytes_ -= projected(*out);
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
