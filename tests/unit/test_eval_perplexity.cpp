// perplexity() prefills each window in chunks of PerplexityOptions::batch tokens, halving a chunk
// the KV budget cannot reserve: chunk size must not change the f16 result beyond float summation
// order, and a progressive 2-bit cache under a budget too small for a one-pass prefill (but above
// KvByteModel::sequence_bytes_bound) must now complete. Real model (SmolLM2) and WikiText-2 text;
// skipped when either is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/perplexity.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

const std::string kWikitext = test::shared_path("data/wikitext-2/test.txt");
constexpr int kCtx = 256;            // one window of 256 tokens, the last 127 scored
constexpr size_t kTextChars = 4000;  // ~900 tokens of the start of the file: enough for one window

// Chunked vs one-call f16 prefill differ in the order of float sums (online softmax over pages vs
// within a chunk); a sum
// that moves by an ulp can round a K/V element to the neighbouring fp16 value. Observed: per
// token |dNLL| up to 3.3e-3, mean NLL within 5e-5. A wrong position or a lost chunk moves NLLs
// by O(1) and the mean by far more than these limits.
constexpr double kChunkTokenNllTol = 1e-2;
constexpr double kChunkMeanNllTol = 5e-4;

struct Fixture {
  std::unique_ptr<Model> model;
  std::vector<int32_t> tokens;
  KvDims dims;
};

// Loads the model and tokenizes the start of WikiText-2 test; empty model when unavailable.
const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    const std::string path = test::default_model_path();
    if (path.empty() || !std::filesystem::exists(kWikitext)) return x;
    x.model = Model::load(path);
    std::ifstream in(kWikitext);
    std::string text(kTextChars, '\0');
    in.read(text.data(), (std::streamsize)text.size());
    text.resize((size_t)in.gcount());
    const Tokenizer tok = Tokenizer::from_gguf(x.model->gguf());
    x.tokens = tok.encode(text, tok.add_bos(), /*parse_special=*/false);
    const ModelConfig& c = x.model->config();
    x.dims = {c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
    return x;
  }();
  return f;
}

PerplexityResult run(const KvCacheOptions& kv, int batch, int n_ctx = kCtx) {
  const Fixture& f = fixture();
  PerplexityOptions o;
  o.n_ctx = n_ctx;
  o.max_chunks = 1;
  o.batch = batch;
  o.progress = false;
  return perplexity(*f.model, f.tokens, o, [&] { return make_kv_cache(kv, f.dims); });
}

TEST(EvalPerplexity, ChunkedPrefillMatchesOneCallWithF16) {
  if (!fixture().model) GTEST_SKIP() << "real model or " << kWikitext << " absent";
  ASSERT_GE(fixture().tokens.size(), (size_t)kCtx);
  const KvCacheOptions f16;  // method f16
  const PerplexityResult one = run(f16, 512);  // the whole window in one call
  const PerplexityResult chunked = run(f16, 64);
  const PerplexityResult odd = run(f16, 48);   // chunk edges not on pages, one inside the scored half
  ASSERT_EQ(one.n_scored, kCtx - 1 - kCtx / 2);
  ASSERT_EQ(chunked.n_scored, one.n_scored);
  ASSERT_EQ(odd.n_scored, one.n_scored);
  for (size_t i = 0; i < one.nll.size(); ++i) {
    EXPECT_NEAR(chunked.nll[i], one.nll[i], kChunkTokenNllTol) << "scored token " << i;
    EXPECT_NEAR(odd.nll[i], one.nll[i], kChunkTokenNllTol) << "scored token " << i;
  }
  EXPECT_NEAR(chunked.mean_nll, one.mean_nll, kChunkMeanNllTol);
  EXPECT_NEAR(odd.mean_nll, one.mean_nll, kChunkMeanNllTol);
  EXPECT_TRUE(std::isfinite(one.ppl));
  EXPECT_GT(one.ppl, 1.0);
}

TEST(EvalPerplexity, ProgressiveUnderTightBudgetCompletes) {
  if (!fixture().model) GTEST_SKIP() << "real model or " << kWikitext << " absent";
  KvCacheOptions kv;
  kv.method = KvMethod::progressive;
  kv.bits = 2;
  const size_t bound = make_kv_cache(kv, fixture().dims)->byte_model().sequence_bytes_bound(kCtx);
  // Just above the bound: one window surely fits once full pages are at 2 bits...
  kv.budget_mib = (double)(bound + 4096) / 1048576.0;
  {  // ...but not when the whole window arrives at 16 bits in one forward call (the old failure).
    auto probe = make_kv_cache(kv, fixture().dims);
    ASSERT_FALSE(probe->reserve(0, kCtx)) << "the budget is not tight enough to test chunking";
  }
  const PerplexityResult r = run(kv, 512);
  EXPECT_EQ(r.n_scored, kCtx - 1 - kCtx / 2);
  EXPECT_TRUE(std::isfinite(r.ppl));
  // Sanity against f16 on the same window: 2-bit pages cost some quality, not orders of magnitude.
  const PerplexityResult f16 = run(KvCacheOptions{}, 512);
  EXPECT_GT(r.ppl, 1.0);
  EXPECT_LT(r.ppl, 3.0 * f16.ppl);
}

TEST(EvalPerplexity, BudgetBelowOneWindowIsAClearError) {
  if (!fixture().model) GTEST_SKIP() << "real model or " << kWikitext << " absent";
  constexpr int kLongCtx = 1024;
  ASSERT_GE(fixture().tokens.size(), (size_t)kLongCtx);
  KvCacheOptions kv;
  kv.method = KvMethod::progressive;
  kv.bits = 2;
  // A budget that holds a 256-token window but not a 1024-token one, even fully shrunk.
  kv.budget_mib = (double)make_kv_cache(kv, fixture().dims)->byte_model().sequence_bytes_bound(kCtx) / 1048576.0;
  try {
    run(kv, 512, kLongCtx);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the KV budget cannot hold one window of 1024 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("surely fits in"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace mpkv
