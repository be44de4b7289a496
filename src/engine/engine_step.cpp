// Engine::step()'s batch work (engine.h, steps 4-5): KV reservations with preemption, one forward
// pass for the whole batch, sampling and stop rules, and the metrics snapshot.
#include <algorithm>

#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"

namespace mpkv {

bool Engine::reserve_all(std::vector<BatchEntry>& entries) {
  for (BatchEntry& e : entries) {
    while (e.n_tokens > 0) {
      // A prefill chunk that does not fit is halved first (fewer fresh pages at once).
      if (const int n = reserve_halving(*cache_, e.seq->cache_slot, e.n_tokens)) {
        e.n_tokens = n;
        break;
      }
      // Every page is at its floor: the newest running sequence gives its pages back.
      MPKV_ASSERT(sched_->n_running() > 1, "a request that fits the KV budget alone cannot reserve one token");
      Sequence* victim = sched_->preempt_newest();
      cache_->remove(victim->cache_slot);
      victim->cache_slot = -1;
      totals_.preemptions_total++;
      for (BatchEntry& o : entries)
        if (o.seq == victim) o.n_tokens = 0;
    }
  }
  std::erase_if(entries, [](const BatchEntry& e) { return e.n_tokens == 0; });
  return !entries.empty();
}

void Engine::forward_and_sample(std::vector<BatchEntry>& entries) {
  std::vector<BatchToken> batch;
  for (const BatchEntry& e : entries) {
    const Sequence& s = *e.seq;
    for (int i = 0; i < e.n_tokens; ++i) {
      const int k = s.n_cached + i;
      batch.push_back({s.tokens[k], k, s.cache_slot, k + 1 == (int)s.tokens.size()});
    }
  }
  runner_->run(batch, logits_);
  const size_t n_vocab = (size_t)model_.config().n_vocab;
  size_t row = 0;
  for (BatchEntry& e : entries) {
    Sequence& s = *e.seq;
    s.n_cached += e.n_tokens;
    if (s.n_cached == (int)s.tokens.size()) emit_token(s, logits_.data() + row++ * n_vocab);  // may finish s
  }
  MPKV_ASSERT(row * n_vocab == logits_.size(), "engine: logits rows do not match the batch");
}

void Engine::emit_token(Sequence& s, const float* logits) {
  const int n_vocab = model_.config().n_vocab;
  const int32_t t = s.sampler.sample(logits, n_vocab);
  RequestOutput out;
  out.id = s.id;
  out.tokens = {t};
  if (s.params.top_logprobs >= 0) out.logprobs.push_back(token_logprobs(logits, n_vocab, t, s.params.top_logprobs));
  s.tokens.push_back(t);
  totals_.generation_tokens_total++;
  if (!s.produced_token) {
    s.produced_token = true;
    s.stats.first_token_seconds = s.seconds_since_arrival();
    totals_.prompt_tokens_total += s.n_prompt;
  }
  FinishReason r = FinishReason::none;
  if (tok_.is_end_of_generation(t) && !s.params.ignore_eos) {
    r = FinishReason::stop;
  } else {
    out.text_delta = s.text.push(tok_.token_piece(t));
    if (s.text.stopped()) r = FinishReason::stop;
  }
  if (r == FinishReason::none && s.params.max_tokens >= 0 && s.n_generated() >= s.params.max_tokens)
    r = FinishReason::length;
  if (r == FinishReason::none && (int)s.tokens.size() >= opts_.n_ctx) r = FinishReason::context;
  if (r != FinishReason::none) {
    finish(s, r, std::move(out));
  } else {
    s.stats.n_generated = s.n_generated();
    if (s.on_output) s.on_output(out);
  }
}

void Engine::finish(Sequence& s, FinishReason r, RequestOutput out) {
  out.id = s.id;
  out.finished = true;
  out.reason = r;
  if (r != FinishReason::abort) out.text_delta += s.text.finish();
  s.status = SeqStatus::finished;
  s.reason = r;
  s.stats.n_generated = s.n_generated();
  s.stats.total_seconds = s.seconds_since_arrival();
  out.stats = s.stats;
  if (s.cache_slot >= 0) cache_->remove(s.cache_slot);
  const std::unique_ptr<Sequence> owned = sched_->take(&s);
  totals_.requests_finished_total++;
  if (owned->on_output) owned->on_output(out);
}

void Engine::publish_metrics() {
  EngineMetrics m = totals_;
  m.running = (int)sched_->n_running();
  m.waiting = (int)sched_->n_waiting();
  m.kv_bytes_used = cache_->bytes_used();
  for (const auto& s : sched_->running()) m.kv_tokens += (size_t)std::max(0, cache_->length(s->cache_slot, 0));
  const ModelConfig& c = model_.config();
  const double elements = (double)m.kv_tokens * c.n_layer * c.kv_dim() * 2;
  m.kv_effective_bits = elements > 0 ? 8.0 * (double)m.kv_bytes_used / elements : 0.0;
  const ShrinkTotals& st = cache_->shrink_totals();
  for (int b : {16, 8, 4, 2})
    if (st.halvings_from[b] > 0) m.page_shrinks[{b, b / 2}] = st.halvings_from[b];
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = m;
}

}  // namespace mpkv
