#include "eval/single_drop_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "engine/model_runner.h"
#include "eval/kv_metrics.h"
#include "eval/runtime_fake_kv_cache.h"
#include "kvcache/f16_kv_cache.h"
#include "util/error.h"
#include "util/progress.h"

namespace mpkv {

namespace {

// Log-softmax rows of one teacher-forced pass at positions [first, n_ctx - 1).
void pass_logp(const Model& model, KvCache& cache, const std::vector<int32_t>& win, int first,
               std::vector<float>& logits, std::vector<double>& logp) {
  const int n_vocab = model.config().n_vocab, n_ctx = (int)win.size(), n = n_ctx - 1 - first;
  ModelRunner runner(model, cache);
  runner.prefill(0, win, 0, n_ctx, {(size_t)first, (size_t)n_ctx - 1},
                 [&](size_t, size_t rows, const float* l) { logits.assign(l, l + rows * n_vocab); });
  logp.resize((size_t)n * n_vocab);
#pragma omp parallel for
  for (int i = 0; i < n; ++i) log_softmax(logits.data() + (size_t)i * n_vocab, n_vocab, logp.data() + (size_t)i * n_vocab);
}

// Sum over rows of KL(p || q), both given as log-probabilities.
double kl_sum(const std::vector<double>& p, const std::vector<double>& q, int rows, int n_vocab) {
  double s = 0;
#pragma omp parallel for reduction(+ : s)
  for (int i = 0; i < rows; ++i) {
    const double* a = p.data() + (size_t)i * n_vocab;
    const double* b = q.data() + (size_t)i * n_vocab;
    double k = 0;
    for (int j = 0; j < n_vocab; ++j) k += std::exp(a[j]) * (a[j] - b[j]);
    s += std::max(0.0, k);
  }
  return s;
}

std::vector<double> ranks(const std::vector<double>& x) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = (i + j) / 2.0 + 1;  // average rank of the tie
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  MPKV_CHECK(a.size() == b.size() && a.size() >= 2, "spearman: need two series of the same length >= 2");
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = (double)a.size(), mean = (n + 1) / 2;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

SingleDropResult measure_single_drops(const Model& model, const std::vector<int32_t>& tokens, const KvPlan& base,
                                      const std::vector<DropComponent>& components, int drop_bits,
                                      const SingleDropOptions& o) {
  const KvDims dims = model.config().kv_dims();
  validate(base, dims);
  MPKV_CHECK(!base.progressive, "prediction check: the base plan must have fixed widths (not progressive)");
  MPKV_CHECK(o.n_ctx >= 8 && o.windows >= 1 && (int64_t)tokens.size() >= (int64_t)o.n_ctx * o.windows,
             "prediction check: the text has " + std::to_string(tokens.size()) + " tokens, fewer than " +
                 std::to_string(o.windows) + " windows of " + std::to_string(o.n_ctx));
  std::vector<KvPlan> plans;  // every variant validated before any pass
  for (const DropComponent& c : components) {
    KvPlan p = base;
    KvComponentPlan& cp = p.at(c.layer, c.head, c.role);
    MPKV_CHECK(!cp.fp16 && drop_bits < cp.bits, "prediction check: component (" + std::to_string(c.layer) + ", " +
                                                    std::to_string(c.head) + ") is not above " +
                                                    std::to_string(drop_bits) + " bits");
    cp.bits = drop_bits;
    validate(p, dims);
    plans.push_back(std::move(p));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int n_vocab = model.config().n_vocab, first = o.n_ctx / 2, rows = o.n_ctx - 1 - first;
  SingleDropResult r;
  r.kl.assign(components.size(), 0.0);
  r.kl_from_base.assign(components.size(), 0.0);
  std::vector<float> logits;
  std::vector<double> ref, base_lp, lp;
  ProgressBar bar("prediction check", (size_t)o.windows * (components.size() + 2), o.progress);
  for (int w = 0; w < o.windows; ++w) {
    std::vector<int32_t> win(tokens.begin() + (size_t)w * o.n_ctx, tokens.begin() + (size_t)(w + 1) * o.n_ctx);
    if (o.add_bos && o.bos >= 0) win[0] = o.bos;
    {
      F16KvCache f16(dims);
      pass_logp(model, f16, win, first, logits, ref);
      RuntimeFakeQuantKvCache b(dims, base);
      pass_logp(model, b, win, first, logits, base_lp);
    }
    r.kl_base += kl_sum(ref, base_lp, rows, n_vocab);
    bar.update((size_t)w * (components.size() + 2) + 2);
    for (size_t i = 0; i < plans.size(); ++i) {
      RuntimeFakeQuantKvCache c(dims, plans[i]);
      pass_logp(model, c, win, first, logits, lp);
      r.kl[i] += kl_sum(ref, lp, rows, n_vocab);
      r.kl_from_base[i] += kl_sum(base_lp, lp, rows, n_vocab);
      bar.update((size_t)w * (components.size() + 2) + i + 3);
    }
  }
  bar.finish();
  r.scored = (int64_t)rows * o.windows;
  r.kl_base /= (double)r.scored;
  for (auto* v : {&r.kl, &r.kl_from_base})
    for (double& x : *v) x /= (double)r.scored;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace mpkv
