// Engine::step()'s run and postprocess (engine.h): one forward pass for the whole batch, sampling,
// stop rules and callbacks, and the metrics snapshot.
#include <algorithm>
#include <chrono>

#include "engine/engine.h"
#include "engine/logprobs.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "kvcache/paged_kv_cache.h"
#include "util/thread_pool.h"

namespace mpkv {

// Run: one forward pass for the whole batch; every entry's tokens become cached. Logits rows: a
// sequence's last token, and the prompt positions whose logprobs it wants (in batch order).
bool Engine::forward(const std::vector<BatchEntry>& batch) {
  std::vector<BatchToken> tokens;
  bool all_decode = true;
  for (const BatchEntry& e : batch) {
    const Sequence& s = *e.seq;
    const bool decode = s.produced_token && e.n_tokens == 1 && s.n_cached + 1 == (int)s.tokens.size();
    all_decode = all_decode && decode;
    (decode ? totals_.forwarded_decode_tokens_total : totals_.forwarded_prefill_tokens_total) += e.n_tokens;
    for (int i = 0; i < e.n_tokens; ++i) {
      const int k = s.n_cached + i;
      tokens.push_back({s.tokens[k], k, s.cache_slot, k + 1 == (int)s.tokens.size() || s.wants_prompt_logits_at(k)});
    }
  }
  runner_->run(tokens, logits_);
  for (const BatchEntry& e : batch) e.seq->n_cached += e.n_tokens;
  return all_decode;
}

// Each entry is one token of its sequence at position n_cached - 1, already appended.
StepWork Engine::decode_work(const std::vector<BatchEntry>& batch) const {
  std::vector<DecodeToken> tokens;
  for (const BatchEntry& e : batch) tokens.push_back({e.seq->cache_slot, e.seq->n_cached - 1});
  return decode_call_work(weight_work_, *cache_, tokens);
}

// Postprocess: every sequence whose tokens are now all cached samples its next token from its
// last row; rows of prompt positions (forward) become prompt logprobs. Then stop rules and
// callbacks.
void Engine::sample_and_emit(const std::vector<BatchEntry>& batch) {
  const int n_vocab = model_.config().n_vocab;
  std::vector<Sequence*> emitting;
  std::vector<size_t> rows;  // logits row of each emitting sequence
  struct PromptRow {
    Sequence* seq;
    int pos;
    size_t row;
  };
  std::vector<PromptRow> prompt_rows;
  size_t n_rows = 0;
  for (const BatchEntry& e : batch) {
    Sequence& s = *e.seq;
    for (int k = s.n_cached - e.n_tokens; k < s.n_cached; ++k)  // the positions forward() ran
      if (s.wants_prompt_logits_at(k)) prompt_rows.push_back({&s, k, n_rows++});
    if (s.n_cached == (int)s.tokens.size()) emitting.push_back(&s), rows.push_back(n_rows++);
  }
  MPKV_ASSERT(n_rows * (size_t)n_vocab == logits_.size(), "engine: logits rows do not match the batch");
  std::vector<TokenLogprobs> prompt_lps(prompt_rows.size());
  parallel_for((int64_t)prompt_rows.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const PromptRow& p = prompt_rows[i];
      prompt_lps[i] = token_logprobs(logits_.data() + p.row * n_vocab, n_vocab, p.seq->tokens[p.pos + 1],
                                     p.seq->params.prompt_logprobs);
    }
  });
  for (size_t i = 0; i < prompt_rows.size(); ++i) prompt_rows[i].seq->prompt_logprobs.push_back(std::move(prompt_lps[i]));
  // (a) Check-first (docs/structured_outputs.md, "Masks in the engine"): a constrained row whose
  // sampling allows it draws without its grammar's mask; when the grammar takes the token, that is
  // the row's token and no mask is filled. The rows left that sample under their grammar (refused,
  // or not allowed to check first) fill their masks, in parallel, before (b).
  std::vector<Sampled> sampled(emitting.size());
  std::vector<CheckFirst> checked(emitting.size(), CheckFirst::not_tried);
  parallel_for((int64_t)emitting.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      checked[i] = sample_check_first(*emitting[i], logits_.data() + rows[i] * n_vocab, sampled[i].token);
  });
  std::vector<Sequence*> to_mask;
  for (size_t i = 0; i < emitting.size(); ++i) {
    const Sequence& s = *emitting[i];
    totals_.grammar_check_first_rows_total += checked[i] != CheckFirst::not_tried;
    totals_.grammar_mask_skipped_rows_total += checked[i] == CheckFirst::taken;
    if (checked[i] != CheckFirst::taken && s.grammar_active() && !s.reasoning_budget.forced()) to_mask.push_back(emitting[i]);
  }
  fill_grammar_masks(to_mask);
  // (b) Sampling and logprobs of every row at once: each sequence has its own Sampler (and rng),
  // so the tokens do not depend on which thread samples which row (docs/design.md, "Sampling").
  // A constrained row samples under its mask and advances its matcher by the token. Logprobs are
  // the model's (the raw logits, as vLLM reports them), not the masked distribution's.
  parallel_for((int64_t)emitting.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Sequence& s = *emitting[i];
      const float* logits = logits_.data() + rows[i] * n_vocab;
      if (checked[i] != CheckFirst::taken) {
        // A spent thinking budget forces its end tag (reasoning_budget.h); the sampler's penalty
        // history takes the forced token too. A grammar governs every token of a constrained
        // sequence past its gate (grammar_gate.h: the thinking before it is free), so a tag forced
        // past the gate too must be one it allows (docs/structured_outputs.md).
        const std::optional<int32_t> forced = s.reasoning_budget.forced();
        if (forced) s.sampler.accept(*forced);
        sampled[i].token = forced ? *forced : s.sampler.sample(logits, n_vocab, s.sampling_mask());
        if (!s.accept_constrained(sampled[i].token))
          throw InternalError("engine: the grammar refused token " + std::to_string(sampled[i].token) +
                              (forced ? ", forced by the thinking budget" : ", which its mask allowed"));
      }
      if (s.params.top_logprobs >= 0)
        sampled[i].logprobs.push_back(token_logprobs(logits, n_vocab, sampled[i].token, s.params.top_logprobs));
    }
  });
  // (b) Stop rules and callbacks, serially in batch order.
  for (size_t i = 0; i < emitting.size(); ++i) emit_token(*emitting[i], std::move(sampled[i]));  // may finish it
}

Engine::CheckFirst Engine::sample_check_first(Sequence& s, const float* logits, int32_t& token) const {
  if (!opts_.grammar_check_first || !s.grammar_active() || !s.matcher->accepts_before_mask() || s.reasoning_budget.forced())
    return CheckFirst::not_tried;
  const int32_t t = s.sampler.propose(logits, model_.config().n_vocab);  // -1: not for these options
  if (t < 0) return CheckFirst::not_tried;
  if (!s.matcher->accept(t)) return CheckFirst::refused;  // nothing changed: the mask decides
  s.sampler.commit(t);
  token = t;
  return CheckFirst::taken;
}

// The masks of this step's rows that sample under their grammar's mask (each grammar_active), one
// row per pool task (docs/structured_outputs.md, "Masks in the engine"); the phase's wall time goes
// to the metrics.
void Engine::fill_grammar_masks(const std::vector<Sequence*>& seqs) {
  std::vector<TokenMatcher*> matchers;
  for (Sequence* s : seqs) matchers.push_back(s->matcher.get());
  if (matchers.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for((int64_t)matchers.size(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) matchers[i]->fill_mask();
  });
  totals_.grammar_mask_seconds_total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  totals_.grammar_mask_rows_total += matchers.size();
  totals_.grammar_mask_steps_total++;
}

void Engine::emit_token(Sequence& s, Sampled sampled) {
  const int32_t t = sampled.token;
  RequestOutput out;
  out.id = s.id;
  out.tokens = {t};
  out.logprobs = std::move(sampled.logprobs);
  s.tokens.push_back(t);
  s.reasoning_budget.accept(t);
  totals_.generation_tokens_total++;
  if (!s.produced_token) {
    s.produced_token = true;
    out.prompt_logprobs = std::move(s.prompt_logprobs);
    s.stats.first_token_seconds = s.seconds_since_arrival();
    totals_.prompt_tokens_total += s.n_prompt;
  }
  // min_tokens (vLLM's rule): an end-of-generation token counts once min_tokens tokens came before
  // it; stop strings once min_tokens tokens, this one included, are out.
  FinishReason r = FinishReason::none;
  const int n_gen = s.n_generated();
  const bool eog = tok_.is_end_of_generation(t) && !s.params.ignore_eos;
  const bool stop_token = std::find(s.params.stop_token_ids.begin(), s.params.stop_token_ids.end(), t) !=
                          s.params.stop_token_ids.end();
  if ((eog || stop_token) && n_gen - 1 >= s.params.min_tokens) {
    r = FinishReason::stop;
  } else {
    out.text_delta = s.text.push(tok_.token_piece(t), /*match_stop=*/n_gen >= s.params.min_tokens);
    if (s.text.stopped()) r = FinishReason::stop;
  }
  // A grammar ends only by a stop token (eog above); max_tokens or the context inside it: length.
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
  const std::unique_ptr<Sequence> owned = sched_->finish(&s);  // frees its KV pages
  totals_.requests_finished_total++;
  if (owned->on_output) owned->on_output(out);
}

void Engine::publish_metrics() {
  EngineMetrics m = totals_;
  m.preemptions_total = sched_->preemptions_total();
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
  m.prefix_cache_on = cache_->prefix_cache_enabled();
  m.prefix_cache_queries_total = sched_->prefix_queries_total();
  m.prefix_cache_hits_total = sched_->prefix_hits_total();
  m.prefix_cache = cache_->prefix_stats();
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = m;
}

}  // namespace mpkv
