#include "eval/eval_protocols.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "engine/model_runner.h"
#include "eval/fake_quant_kv_cache.h"
#include "eval/kv_metrics.h"
#include "util/error.h"
#include "util/units.h"
#include "util/progress.h"

namespace mpkv {

namespace {

// Window w of the text, as `mpkv ppl` cuts it.
std::vector<std::vector<int32_t>> text_windows(const std::vector<int32_t>& tokens, const TextEvalOptions& o) {
  MPKV_CHECK(o.n_ctx >= 8 && o.windows >= 1, "eval: need a context of at least 8 tokens and at least one window");
  MPKV_CHECK((int64_t)tokens.size() >= (int64_t)o.windows * o.n_ctx,
             "eval: the text has " + std::to_string(tokens.size()) + " tokens, fewer than " + std::to_string(o.windows) +
                 " windows of " + std::to_string(o.n_ctx));
  std::vector<std::vector<int32_t>> w(o.windows);
  for (int i = 0; i < o.windows; ++i) {
    w[i].assign(tokens.begin() + (size_t)i * o.n_ctx, tokens.begin() + (size_t)(i + 1) * o.n_ctx);
    if (o.add_bos && o.bos >= 0) w[i][0] = o.bos;
  }
  return w;
}

void check_no_f16(const std::vector<EvalMethod>& methods) {
  for (const auto& m : methods)
    MPKV_CHECK(m.kv.method != KvMethod::f16 || !m.kv.plan_file.empty(), "eval: f16 is the reference; do not list it as a method");
}

// Intervals of a method's dPPL (paired with the reference at the same positions) and mean KL.
RowIntervals row_intervals(const MetricAccumulator& ref, const MetricAccumulator& a, BootstrapOptions o, int block) {
  MPKV_ASSERT(a.n == ref.n && a.stream == ref.stream, "eval: a method and the reference scored different positions");
  o.block = block;
  const std::vector<int32_t> blocks = bootstrap_blocks(a.stream, block);
  const std::vector<double> kl(a.kl.begin(), a.kl.end());
  return {block, bootstrap_ppl_delta_pct(a.nll, ref.nll, blocks, o), bootstrap_mean(kl, blocks, o)};
}

// Fills rows for the reference and each method from accumulators.
std::vector<EvalRow> make_rows(const std::string& protocol, const MetricAccumulator& ref,
                               const std::vector<EvalMethod>& methods, const std::vector<MetricAccumulator>& acc,
                               double seconds, const TextEvalOptions& o) {
  std::vector<EvalRow> rows;
  const std::vector<int32_t> blocks = bootstrap_blocks(ref.stream, o.bootstrap.block);
  const int64_t n_blocks = blocks.empty() ? 0 : *std::max_element(blocks.begin(), blocks.end()) + 1;
  auto row = [&](const std::string& method, const std::string& label, double bits, const MetricAccumulator& a) {
    EvalRow r;
    r.method = method;
    r.label = label;
    r.protocol = protocol;
    r.bits = bits;
    r.ppl = a.ppl();
    r.ppl_delta_pct = 100.0 * (r.ppl / ref.ppl() - 1.0);
    r.kl_mean = a.kl_mean();
    r.kl_p99 = a.kl_percentile(99);
    r.top1 = a.top1_rate();
    r.scored = a.n;
    r.seconds = seconds;
    r.ci = row_intervals(ref, a, o.bootstrap, o.bootstrap.block);
    for (int b : o.sensitivity_blocks) r.ci_by_block.push_back(row_intervals(ref, a, o.bootstrap, b));
    r.ci_blocks = n_blocks;
    rows.push_back(r);
  };
  row("f16", "f16", 16, ref);
  for (size_t m = 0; m < methods.size(); ++m) row(methods[m].method, methods[m].label, methods[m].bits, acc[m]);
  return rows;
}

// Compares rows [n_rows] of logits with the reference log-probs of each row's stream, in parallel.
void compare_rows(const std::vector<double>& ref_logp, const float* logits, int n_rows, int n_streams, int n_vocab,
                  const std::vector<int32_t>& targets, std::vector<TokenComparison>& out) {
  out.resize(n_rows);
#pragma omp parallel
  {
    std::vector<double> scratch;
#pragma omp for schedule(dynamic)
    for (int r = 0; r < n_rows; ++r) {
      const int w = r % n_streams;
      out[r] = compare_token(ref_logp.data() + (size_t)w * n_vocab, logits + (size_t)r * n_vocab, n_vocab, targets[w], scratch);
    }
  }
}

}  // namespace

std::vector<EvalRow> eval_decode(const Model& model, const std::vector<int32_t>& tokens,
                                 const std::vector<EvalMethod>& methods, const TextEvalOptions& o) {
  check_no_f16(methods);
  const auto win = text_windows(tokens, o);
  const int W = o.windows, M = (int)methods.size(), n_vocab = model.config().n_vocab, first = o.n_ctx / 2;
  const double t0 = now_s();
  LockstepDecoder dec(model, methods, W, o.n_ctx);
  MetricAccumulator ref;
  std::vector<MetricAccumulator> acc(M);
  std::vector<float> logits;
  std::vector<double> ref_logp((size_t)W * n_vocab);
  std::vector<int32_t> step_tokens(W), targets(W);
  std::vector<TokenComparison> cmp;
  ProgressBar bar("eval decode", o.n_ctx - 1, o.progress);
  // Steps 0 .. n_ctx-2: the logits at position n_ctx-1 would predict a token past the window.
  for (int t = 0; t < o.n_ctx - 1; ++t) {
    for (int w = 0; w < W; ++w) step_tokens[w] = win[w][t];
    const bool scored = t >= first;
    dec.step(step_tokens, t, scored, logits);
    if (scored) {
      for (int w = 0; w < W; ++w) targets[w] = win[w][t + 1];
#pragma omp parallel for
      for (int w = 0; w < W; ++w) log_softmax(logits.data() + (size_t)w * n_vocab, n_vocab, ref_logp.data() + (size_t)w * n_vocab);
      for (int w = 0; w < W; ++w) ref.add({-ref_logp[(size_t)w * n_vocab + targets[w]], 0.0, true}, w);
      compare_rows(ref_logp, logits.data() + (size_t)W * n_vocab, M * W, W, n_vocab, targets, cmp);
      for (int r = 0; r < M * W; ++r) acc[r / W].add(cmp[r], r % W);
    }
    bar.update(t + 1);
  }
  bar.finish();
  std::vector<EvalRow> rows = make_rows("decode", ref, methods, acc, now_s() - t0, o);
  const double tokens_held = (double)W * (o.n_ctx - 1);
  // K/V elements the model needs at the end: a sliding-window layer needs only its last W positions
  // (Gemma 3: 5 of 6 layers), so the x axis is not flattered by the positions those layers dropped.
  const KvDims d = model.config().kv_dims();
  double layer_positions = 0;
  for (int l = 0; l < d.n_layer; ++l) {
    const int win = d.window_of(l);
    layer_positions += win > 0 ? std::min(o.n_ctx - 1, win) : o.n_ctx - 1;
  }
  const double elements = W * layer_positions * d.n_head_kv * d.head_dim * 2;
  for (int m = -1; m < M; ++m) {
    const double bytes = (double)dec.cache(m).bytes_used();
    rows[m + 1].stored_bits_per_element = bytes * 8 / elements;
    rows[m + 1].bytes_per_token = bytes / tokens_held;
  }
  return rows;
}

std::vector<EvalRow> eval_prefill_fake(const Model& model, const std::vector<int32_t>& tokens,
                                       const std::vector<EvalMethod>& methods, const TextEvalOptions& o) {
  check_no_f16(methods);
  const auto win = text_windows(tokens, o);
  const KvDims dims = model.config().kv_dims();
  const int M = (int)methods.size(), n_vocab = model.config().n_vocab, first = o.n_ctx / 2;
  const int n_scored = o.n_ctx - 1 - first;
  std::vector<KvPlan> plans;
  for (const auto& m : methods) plans.push_back(make_kv_plan(m.kv, dims));  // all errors before any work
  // same[m]: the first method whose fake-quant cache computes exactly what m's does (e.g.
  // progressive-b and uniform-b); m's passes are not run, its accumulator is copied from same[m]'s.
  std::vector<int> same(M);
  for (int m = 0; m < M; ++m) {
    same[m] = m;
    for (int e = 0; e < m && same[m] == m; ++e)
      if (same[e] == e && same_fake_quant_cache(plans[e], plans[m])) same[m] = e;
  }
  const double t0 = now_s();
  MetricAccumulator ref;
  std::vector<MetricAccumulator> acc(M);
  std::vector<float> logits;
  std::vector<double> ref_logp((size_t)n_scored * n_vocab);
  std::vector<int32_t> targets(n_scored);
  std::vector<TokenComparison> cmp;
  ProgressBar bar("eval prefill-fake", (size_t)o.windows * (M + 1), o.progress);
  for (int w = 0; w < o.windows; ++w) {
    for (int i = 0; i < n_scored; ++i) targets[i] = win[w][first + i + 1];
    for (int m = -1; m < M; ++m) {
      if (m >= 0 && same[m] != m) continue;
      std::unique_ptr<KvCache> cache;
      if (m < 0) cache = std::make_unique<F16KvCache>(dims);
      else cache = std::make_unique<FakeQuantKvCache>(dims, plans[m]);
      // One pass over the window; logits of positions [first, n_ctx - 1).
      ModelRunner runner(model, *cache);
      runner.prefill(0, win[w], 0, o.n_ctx, {(size_t)first, (size_t)o.n_ctx - 1},
                     [&](size_t, size_t n, const float* rows) { logits.assign(rows, rows + n * n_vocab); });
      if (m < 0) {
#pragma omp parallel for
        for (int i = 0; i < n_scored; ++i)
          log_softmax(logits.data() + (size_t)i * n_vocab, n_vocab, ref_logp.data() + (size_t)i * n_vocab);
        for (int i = 0; i < n_scored; ++i) ref.add({-ref_logp[(size_t)i * n_vocab + targets[i]], 0.0, true}, w);
      } else {
        // Rows are positions here: "stream" i of n_scored, each with its own reference row.
        compare_rows(ref_logp, logits.data(), n_scored, n_scored, n_vocab, targets, cmp);
        for (const auto& c : cmp) acc[m].add(c, w);
      }
      bar.update((size_t)w * (M + 1) + m + 2);
    }
  }
  bar.finish();
  for (int m = 0; m < M; ++m) acc[m] = acc[same[m]];
  return make_rows("prefill-fake", ref, methods, acc, now_s() - t0, o);
}

DriftResult eval_drift(const Model& model, const std::vector<int32_t>& prompt, const std::vector<EvalMethod>& methods,
                       const DriftOptions& o, const std::function<bool(int32_t)>& excluded) {
  check_no_f16(methods);
  MPKV_CHECK(!prompt.empty(), "eval drift: empty prompt");
  MPKV_CHECK(o.n_tokens >= 1 && o.bucket >= 1, "eval drift: need at least one token and a bucket of at least one");
  const int P = (int)prompt.size(), N = o.n_tokens, M = (int)methods.size(), n_vocab = model.config().n_vocab;
  const double t0 = now_s();
  LockstepDecoder dec(model, methods, 1, P + N);
  DriftResult r;
  r.prompt_tokens = P;
  r.tokens = N;
  r.bucket = o.bucket;
  const int n_buckets = (N + o.bucket - 1) / o.bucket;
  for (int b = 0; b < n_buckets; ++b) r.bucket_start.push_back(b * o.bucket);
  std::vector<MetricAccumulator> all(M), cur(M);
  std::vector<DriftCurve> curves(M);
  std::vector<float> logits;
  std::vector<double> ref_logp(n_vocab);
  std::vector<TokenComparison> cmp;
  ProgressBar bar("eval drift", P + N - 1, o.progress);
  int32_t next = prompt[0];
  // Step t feeds position t; its logits predict position t + 1, which is generated position
  // i = t + 1 - P when t >= P - 1.
  for (int t = 0; t < P + N - 1; ++t) {
    const int32_t tok = t < P ? prompt[t] : next;
    if (t >= P) r.generated.push_back(tok);
    const bool compare = t >= P - 1;
    dec.step({tok}, t, compare, logits);
    if (compare) {
      log_softmax(logits.data(), n_vocab, ref_logp.data());
      int best = -1;
      for (int i = 0; i < n_vocab; ++i)
        if (!excluded(i) && (best < 0 || ref_logp[i] > ref_logp[best])) best = i;
      MPKV_CHECK(best >= 0, "eval drift: every token is excluded");
      next = best;
      compare_rows(ref_logp, logits.data() + n_vocab, M, 1, n_vocab, {-1}, cmp);
      const int i = t + 1 - P;
      for (int m = 0; m < M; ++m) {
        all[m].add(cmp[m]);
        cur[m].add(cmp[m]);
      }
      if ((i + 1) % o.bucket == 0 || i == N - 1) {
        for (int m = 0; m < M; ++m) {
          curves[m].kl_mean.push_back(cur[m].kl_mean());
          curves[m].top1.push_back(cur[m].top1_rate());
          cur[m] = MetricAccumulator{};
        }
      }
    }
    bar.update(t + 1);
  }
  r.generated.push_back(next);
  bar.finish();
  for (int m = 0; m < M; ++m) {
    curves[m].label = methods[m].label;
    curves[m].kl_mean_all = all[m].kl_mean();
    curves[m].top1_all = all[m].top1_rate();
    curves[m].kl_p99_all = all[m].kl_percentile(99);
  }
  r.methods = std::move(curves);
  r.seconds = now_s() - t0;
  return r;
}

}  // namespace mpkv
