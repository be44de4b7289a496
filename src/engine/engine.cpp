#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/logprobs.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "grammar/compiled_constraint.h"
#include "kvcache/paged_kv_cache.h"

namespace mpkv {

Engine::Engine(const Model& model, const Tokenizer& tok, std::unique_ptr<PagedKvCache> cache, EngineOptions opts)
    : model_(model), weight_work_(weight_work(model)), tok_(tok), cache_(std::move(cache)), opts_(opts) {
  MPKV_ASSERT(cache_ != nullptr, "engine: no KV cache");
  MPKV_CHECK(opts_.n_ctx >= 2, "engine: the context (n_ctx) must be at least 2 tokens");
  MPKV_CHECK(opts_.max_seqs >= 1, "engine: max_seqs must be at least 1");
  MPKV_CHECK(opts_.max_batch_tokens >= 1, "engine: max_batch_tokens must be at least 1");
  MPKV_CHECK(opts_.max_queue >= 1, "engine: max_queue must be at least 1");
  MPKV_CHECK(std::isfinite(opts_.admission_overcommit) && opts_.admission_overcommit >= 1.0,
             "engine: admission_overcommit must be >= 1");
  if (opts_.prefix_cache && cache_->budget_bytes() > 0) cache_->enable_prefix_cache(opts_.prefix_cache_floor_bits);
  sched_ = std::make_unique<Scheduler>(
      *cache_, SchedulerOptions{opts_.max_seqs, opts_.max_batch_tokens, opts_.n_ctx, opts_.admission_overcommit});
  runner_ = std::make_unique<ModelRunner>(model_, *cache_);
  totals_.kv_budget_bytes = cache_->budget_bytes();
  snapshot_ = totals_;
}

Engine::~Engine() = default;

void Engine::validate(const RequestParams& p) const {
  const int n_vocab = model_.config().n_vocab;
  const PromptCheck prompt = check_prompt(p.prompt, opts_.n_ctx, n_vocab);
  MPKV_CHECK(prompt.problem != PromptCheck::Problem::empty, "the prompt is empty");
  MPKV_CHECK(prompt.problem != PromptCheck::Problem::too_long,
             "the prompt has " + std::to_string(p.prompt.size()) + " tokens; the context holds " +
                 std::to_string(opts_.n_ctx) + " (prompt + generated), so at most " + std::to_string(opts_.n_ctx - 1) +
                 " fit");
  MPKV_CHECK(prompt.problem != PromptCheck::Problem::bad_token,
             "token id " + std::to_string(prompt.bad_token) + " is outside the vocabulary (" + std::to_string(n_vocab) + ")");
  MPKV_CHECK(p.max_tokens == -1 || p.max_tokens >= 1, "max_tokens must be at least 1 (or -1: until the end)");
  MPKV_CHECK(p.min_tokens >= 0 && (p.max_tokens == -1 || p.min_tokens <= p.max_tokens),
             "min_tokens must be between 0 and max_tokens (" + std::to_string(p.max_tokens) + "), got " +
                 std::to_string(p.min_tokens));
  MPKV_CHECK(p.top_logprobs >= -1 && p.top_logprobs <= kMaxTopLogprobs,
             "top_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));
  MPKV_CHECK(p.prompt_logprobs >= -1 && p.prompt_logprobs <= kMaxTopLogprobs,
             "prompt_logprobs must be between 0 and " + std::to_string(kMaxTopLogprobs));
  Sampler check(p.sampling);  // throws Error on bad sampling values
  if (p.grammar) {
    MPKV_CHECK(p.grammar->vocab_size == n_vocab, "the grammar was compiled for a vocabulary of " +
                                                     std::to_string(p.grammar->vocab_size) + " tokens; this model has " +
                                                     std::to_string(n_vocab));
    MPKV_CHECK(p.min_tokens == 0 && !p.ignore_eos,
               "min_tokens and ignore_eos cannot be combined with a grammar (it alone says where the output may end)");
  }
  MPKV_CHECK(p.grammar_after.empty() || p.grammar, "grammar_after needs a grammar");
  for (int32_t t : p.grammar_after)
    MPKV_CHECK(token_id_valid(t, n_vocab), "grammar_after holds token id " + std::to_string(t) + ", outside the vocabulary");
  sched_->check_fits_alone(
      std::min<int64_t>(p.max_tokens < 0 ? opts_.n_ctx : (int64_t)p.prompt.size() + p.max_tokens, opts_.n_ctx));
}

uint64_t Engine::add_request(RequestParams params, OutputCallback on_output) {
  validate(params);
  std::lock_guard<std::mutex> lock(mu_);
  if ((int64_t)inbox_.size() + snapshot_.waiting >= opts_.max_queue)
    throw QueueFull("the request queue is full (" + std::to_string(opts_.max_queue) + " waiting); retry later");
  const uint64_t id = next_id_++;
  auto seq = std::make_unique<Sequence>(id, std::move(params), std::move(on_output));
  if (!seq->params.grammar_after.empty()) {  // closed until the tag: no ending before the answer
    std::vector<int32_t> ending = tok_.end_of_generation_ids();
    ending.insert(ending.end(), seq->params.stop_token_ids.begin(), seq->params.stop_token_ids.end());
    seq->grammar_gate = GrammarGate(seq->params.grammar_after, ending, model_.config().n_vocab);
  }
  inbox_.push_back(std::move(seq));
  work_cv_.notify_all();
  return id;
}

void Engine::abort(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(id);
  work_cv_.notify_all();
}

bool Engine::has_work() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !inbox_.empty() || !aborts_.empty() || snapshot_.running > 0 || snapshot_.waiting > 0;
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return work_cv_.wait_for(lock, timeout, [&] {
    return !inbox_.empty() || !aborts_.empty() || snapshot_.running > 0 || snapshot_.waiting > 0;
  });
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics m = snapshot_;
  m.waiting += (int)inbox_.size();
  return m;
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

void Engine::take_inbox() {
  std::vector<std::unique_ptr<Sequence>> in;
  std::vector<uint64_t> ab;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.swap(inbox_);
    ab.swap(aborts_);
  }
  for (auto& s : in) {
    if (s->matcher) totals_.constrained_requests_total++;
    sched_->add(std::move(s));
  }
  for (uint64_t id : ab)
    if (Sequence* s = sched_->find(id)) s->abort_requested = true;
}

// schedule -> run -> postprocess (engine.h).
bool Engine::step() {
  const auto t0 = std::chrono::steady_clock::now();
  take_inbox();
  // Aborted requests end first, so their pages are free for this step.
  const std::vector<Sequence*> aborted = sched_->aborted();
  for (Sequence* s : aborted) finish(*s, FinishReason::abort, {});
  std::vector<BatchEntry> batch = sched_->schedule();  // admission, KV reservation, preemption
  if (!batch.empty()) {
    const bool decode = forward(batch);
    sched_->publish(batch);  // before sampling: a request finishing now leaves its pages cached
    const StepWork work = decode ? decode_work(batch) : StepWork{};  // before sampling frees finished pages
    sample_and_emit(batch);
    if (decode) {
      totals_.decode.steps++;
      totals_.decode.tokens += batch.size();
      totals_.decode.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      totals_.decode.work += work;
    }
    totals_.steps_total++;
  }
  publish_metrics();
  return !batch.empty() || !aborted.empty() || !sched_->idle();
}

}  // namespace mpkv
