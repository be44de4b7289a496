// One method over a task file through the engine (task_run.h).
#include "eval/task_run.h"

#include <algorithm>
#include <chrono>

#include "engine/engine.h"
#include "kvcache/paged_kv_cache.h"
#include "util/error.h"

namespace mpkv {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// What one item asks of its method: the tokens its cache sees and its per-sequence budget.
struct Prepared {
  std::vector<int32_t> prompt;
  size_t budget = 0;     // bytes given to the engine for it (0: unbudgeted)
  size_t reference = 0;  // B(n)
  bool over = false;
};

Prepared prepare(const TaskItem& it, const std::vector<int32_t>& prompt, const TaskMethod& m,
                 const KvByteModel& budget, const KvByteModel& own, const KvByteModel& f16,
                 const TaskRunOptions& o, int keep_first) {
  Prepared p;
  const int n = (int)prompt.size() + it.max_tokens;
  p.reference = budget.sequence_bytes_bound(n);
  if (m.policy == PromptPolicy::full) {
    p.prompt = prompt;
    if (m.budgeted) {
      const size_t need = own.sequence_bytes_bound(n);
      p.over = need > p.reference;
      p.budget = std::max(need, p.reference);
    }
    return p;
  }
  const int fits = f16_tokens_within(f16, p.reference) - it.max_tokens;
  MPKV_CHECK(fits > std::max(o.sink, keep_first),
             "eval --task: item '" + it.id + "': the budget of " + std::to_string(p.reference) +
                 " bytes holds no f16 prompt beside its " + std::to_string(it.max_tokens) +
                 " generated tokens (prompt-level eviction cannot evict generated tokens)");
  p.prompt = fit_prompt(prompt, m.policy, fits, o.sink, keep_first);
  return p;
}

size_t elements_per_token(const KvDims& d) { return (size_t)d.n_layer * d.n_head_kv * d.head_dim * 2; }

}  // namespace

const char* prompt_policy_name(PromptPolicy p) {
  return p == PromptPolicy::full ? "full" : p == PromptPolicy::streaming ? "streaming" : "truncate";
}

PromptPolicy parse_prompt_policy(const std::string& s) {
  for (PromptPolicy p : {PromptPolicy::full, PromptPolicy::streaming, PromptPolicy::truncate})
    if (s == prompt_policy_name(p)) return p;
  throw Error("unknown prompt policy '" + s + "' (full, streaming, truncate)");
}

int f16_tokens_within(const KvByteModel& f16, size_t bytes) {
  int lo = 0, hi = 1 << 24;  // the largest t with bound(t) <= bytes lies in [lo, hi)
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (f16.sequence_bytes_bound(mid) <= bytes) lo = mid;
    else hi = mid;
  }
  return lo;
}

std::vector<int32_t> fit_prompt(const std::vector<int32_t>& prompt, PromptPolicy policy, int keep, int sink,
                                int keep_first) {
  const int n = (int)prompt.size();
  if (policy == PromptPolicy::full || keep >= n) return prompt;
  const int head = policy == PromptPolicy::streaming ? sink : keep_first;
  MPKV_ASSERT(keep > head && head >= 0, "fit_prompt: keep must exceed the kept head");
  std::vector<int32_t> out(prompt.begin(), prompt.begin() + head);
  out.insert(out.end(), prompt.end() - (keep - head), prompt.end());
  return out;
}

TaskMethodResult run_task_method(const Model& model, const Tokenizer& tok, const std::vector<TaskItem>& items,
                                 const std::vector<std::vector<int32_t>>& prompts, const TaskMethod& m,
                                 const KvByteModel& budget, const TaskRunOptions& o) {
  MPKV_ASSERT(items.size() == prompts.size() && o.parallel >= 1, "run_task_method: items and prompts differ");
  const KvDims dims = model.config().kv_dims();
  const KvByteModel own(dims, make_kv_plan(m.kv, dims));
  const KvByteModel f16(dims, make_kv_plan(KvCacheOptions{}, dims));
  const int keep_first = tok.add_bos() ? 1 : 0;
  std::vector<Prepared> prep;
  for (size_t i = 0; i < items.size(); ++i) {  // every item is checked before the first forward pass
    prep.push_back(prepare(items[i], prompts[i], m, budget, own, f16, o, keep_first));
    MPKV_CHECK((int)prep.back().prompt.size() + items[i].max_tokens <= o.n_ctx,
               "eval --task: item '" + items[i].id + "' needs " +
                   std::to_string(prep.back().prompt.size() + items[i].max_tokens) + " positions, more than -c " +
                   std::to_string(o.n_ctx));
  }
  TaskMethodResult r;
  r.items.resize(items.size());
  const auto t0 = std::chrono::steady_clock::now();
  double bits_sum = 0, context_bits_sum = 0;
  int batches = 0, right = 0;
  for (size_t b0 = 0; b0 < items.size(); b0 += o.parallel) {
    const size_t b1 = std::min(items.size(), b0 + o.parallel);
    KvCacheOptions kv = m.kv;
    size_t bytes = 0;
    for (size_t i = b0; i < b1; ++i) bytes += prep[i].budget;
    kv.budget_mib = bytes / kMiB;
    EngineOptions eo;
    eo.n_ctx = o.n_ctx;
    eo.max_seqs = (int)(b1 - b0);
    eo.max_queue = (int)(b1 - b0);
    eo.prefix_cache = false;  // items stay independent
    Engine engine(model, tok, make_kv_cache(kv, dims), eo);
    for (size_t i = b0; i < b1; ++i) {
      RequestParams p;
      p.prompt = prep[i].prompt;
      p.max_tokens = items[i].max_tokens;
      p.stop = items[i].stop;
      p.sampling.temperature = 0.0f;
      ItemOutcome& out = r.items[i];
      out.prompt_tokens = (int)prompts[i].size();
      out.kept_tokens = (int)p.prompt.size();
      out.budget_bytes = m.budgeted || m.policy != PromptPolicy::full ? prep[i].reference : 0;
      out.over_budget = prep[i].over;
      engine.add_request(std::move(p), [&out](const RequestOutput& ev) {
        out.generated += ev.text_delta;
        out.generated_tokens += (int)ev.tokens.size();
      });
    }
    engine.run_until_idle();
    size_t tokens = 0, context = 0;
    for (size_t i = b0; i < b1; ++i) {
      r.items[i].correct = answer_correct(r.items[i].generated, items[i].rule, items[i].answer);
      right += r.items[i].correct;
      tokens += r.items[i].kept_tokens + r.items[i].generated_tokens;
      context += r.items[i].prompt_tokens + r.items[i].generated_tokens;
    }
    const size_t peak = engine.cache().pool().peak_used();
    r.peak_bytes = std::max(r.peak_bytes, peak);
    bits_sum += 8.0 * peak / double(tokens * elements_per_token(dims));
    context_bits_sum += 8.0 * peak / double(context * elements_per_token(dims));
    ++batches;
    if (o.on_batch)
      o.on_batch({b1, items.size(), right, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_bits_per_elem = batches ? bits_sum / batches : 0;
  r.context_bits_per_elem = batches ? context_bits_sum / batches : 0;
  return r;
}

}  // namespace mpkv
