// The paged KV cache inside the engine, on a tiny synthetic model: the fp16 path and the 16-bit
// progressive path against F16KvCache through the whole forward pass (prefill and decode). Several
// sequences under one budget are the serving engine's tests (test_serving_engine.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <type_traits>

#include "fixtures/tiny_model.h"
#include "kvcache/f16_kv_cache.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "test_support.h"

namespace mpkv {
namespace {

// fp16 pages hold the same fp16 values as F16KvCache: logits differ only by summation order
// (and the exp polynomial) in attention, relative to the largest |logit|.
constexpr double kF16PagesRel = 1e-4;
// 16-bit min-max codes of fp16 values: each value moves by at most half a step of range / 65535
// (~1e-5 of the range), plus fp16 scale rounding. Every linear layer quantizes its input
// activations to 8-bit blocks (prefill included since the batch-invariant kernels), where a change
// of one fp32 rounding can flip one code, and over 30 layers the flips move the largest logit
// difference by several percent. Summation order alone does that: on the 32-token run, fp16 pages
// (the very fp16 values F16KvCache holds) differ from F16KvCache by 2.2-4.1% depending on which
// tier's attention kernels each side uses, and the 16-bit codes by 4.3-6.2% (AVX-512 5.7%, AVX2
// 4.3%, scalar 4.4%; F16KvCache on scalar kernels with AVX2 packed accumulation 6.1%), while every
// attention kernel stays within fp32 rounding of a double sum (PagedAttentionKernels.
// PackedAccumulateSixteenBitMatchesDoubleSumOnEveryTier). So the bound is the summation-order
// spread with margin (docs/numerics.md, "Tiers end to end"). It catches gross errors only (value
// scales 25% off: 68%; zeros off by a tenth of the range: 45%; but 1% errors stay inside the
// spread): the codes themselves are checked to fp32 rounding against dequantize-then-attend in
// test_kvcache_paged_attention.cpp (uniform16), and the kernels against double sums.
constexpr double kSixteenBitCodesRel = 1e-1;

struct Tiny {
  std::unique_ptr<Model> model;
  KvDims dims;
};

Tiny tiny_model() {
  test::TinyModelSpec spec;
  spec.n_layer = 2;
  const std::string path = test::temp_dir() + "/tiny_paged.gguf";
  test::write_tiny_model(path, spec);
  Tiny t;
  t.model = Model::load(path);
  const ModelConfig& c = t.model->config();
  t.dims = {c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
  return t;
}

// Logits of an n_prefill-token prefill in chunks of 16, then n_decode single-token steps. A paged
// cache (a KvMemory) reserves each call's tokens first; F16KvCache has no budget to reserve in.
template <class Cache>
std::vector<std::vector<float>> run(const Model& m, Cache& cache, int n_prefill = 40, int n_decode = 12) {
  Forward fwd(m);
  const int n_vocab = m.config().n_vocab;
  std::vector<std::vector<float>> out;
  std::vector<float> lg;
  int pos = 0;
  auto tok = [&](int i) { return (int32_t)((i * 37 + 11) % n_vocab); };
  for (int chunk = 0; chunk < n_prefill; chunk += 16) {
    std::vector<BatchToken> b;
    for (int i = chunk; i < std::min(n_prefill, chunk + 16); ++i) b.push_back({tok(i), pos++, 0, true});
    if constexpr (std::is_base_of_v<KvMemory, Cache>) { EXPECT_TRUE(cache.reserve(0, (int)b.size())); }
    fwd.run(cache, b, lg);
    for (size_t r = 0; r < b.size(); ++r) out.emplace_back(lg.begin() + r * n_vocab, lg.begin() + (r + 1) * n_vocab);
  }
  for (int i = n_prefill; i < n_prefill + n_decode; ++i) {
    if constexpr (std::is_base_of_v<KvMemory, Cache>) { EXPECT_TRUE(cache.reserve(0, 1)); }
    fwd.run(cache, {{tok(i), pos++, 0, true}}, lg);
    out.push_back(lg);
  }
  return out;
}

// Over the first `rows` rows (all by default).
double max_rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                    size_t rows = SIZE_MAX) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < std::min(rows, a.size()); ++i)
    for (size_t v = 0; v < a[i].size(); ++v) {
      scale = std::max(scale, (double)std::abs(b[i][v]));
      err = std::max(err, (double)std::abs(a[i][v] - b[i][v]));
    }
  return err / scale;
}

TEST(PagedEngine, F16PagesMatchF16KvCacheThroughTheModel) {
  const Tiny t = tiny_model();
  F16KvCache ref_cache(t.dims);
  const auto ref = run(*t.model, ref_cache);
  KvCacheOptions o;
  o.page_tokens = 8;
  auto f16 = make_kv_cache(o, t.dims);
  EXPECT_LT(max_rel_diff(run(*t.model, *f16), ref), kF16PagesRel) << "fp16 pages";
}

// The random tiny model amplifies 1e-5 perturbations of K/V a hundredfold, so the 16-bit codes
// are compared on the real model, over the logits of the two 16-token prefill chunks (bound: see
// kSixteenBitCodesRel).
TEST(PagedEngine, SixteenBitCodesMatchF16KvCacheOnTheRealModel) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "real model absent (models/SmolLM2-135M-Instruct.Q4_1.gguf)";
  Tiny t;
  t.model = Model::load(path);
  const ModelConfig& c = t.model->config();
  t.dims = {c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
  F16KvCache ref_cache(t.dims);
  const auto ref = run(*t.model, ref_cache, 32, 0);
  KvCacheOptions o;
  o.page_tokens = 8;
  o.method = KvMethod::uniform;
  o.bits = 16;
  o.window = 4;
  auto u16 = make_kv_cache(o, t.dims);
  EXPECT_LT(max_rel_diff(run(*t.model, *u16, 32, 0), ref), kSixteenBitCodesRel) << "16-bit codes";
  o.method = KvMethod::progressive;
  o.bits = 2;
  auto prog = make_kv_cache(o, t.dims);  // no budget: pages stay at 16 bits
  EXPECT_LT(max_rel_diff(run(*t.model, *prog, 32, 0), ref), kSixteenBitCodesRel) << "progressive, unshrunk";
  EXPECT_EQ(prog->shrink_totals().page_shrinks, 0u);
}

}  // namespace
}  // namespace mpkv
