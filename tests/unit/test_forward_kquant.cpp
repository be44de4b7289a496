// End to end through the forward pass with K-quant weights (no real SmolLM2 K-quant file exists
// here): a tiny synthetic llama model whose matrices are Q4_K / Q5_K / Q6_K, against its twin that
// stores the same weights dequantized to F32 (the float-dot path). Also prefill = decode and
// batch invariance with the K-quant kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "fixtures/tiny_model.h"
#include "gguf/gguf_reader.h"
#include "kvcache/f16_kv_cache.h"
#include "model/forward.h"
#include "test_support.h"

namespace mpkv {
namespace {

// The two models differ only in the matvec path: the K-quant one quantizes activations to 8-bit
// blocks of 32 (~0.4% per dot product, matvec.h), the F32 twin is exact up to fp32 rounding. Through
// 2 layers that stays well under the 3% of the largest |logit| that test_forward_reference.cpp
// allows for the same activation quantization against its double reference.
constexpr double kKQuantVsDequantizedRel = 3e-2;

test::TinyModelSpec kquant_spec(test::TinyKQuant mode) {
  test::TinyModelSpec spec;
  spec.d_model = 256;  // every matrix has 256 or 512 columns: all of them K-quants
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.d_ffn = 512;
  spec.tied_output = false;  // the output head too
  spec.seed = 5;
  spec.k_quant = mode;
  return spec;
}

// Logits of each token decoded one by one.
std::vector<std::vector<float>> decode_logits(const Model& model, const std::vector<int32_t>& toks) {
  const ModelConfig& c = model.config();
  F16KvCache cache(KvDims{c.n_layer, c.n_head, c.n_head_kv, c.head_dim});
  Forward fwd(model);
  std::vector<std::vector<float>> out;
  std::vector<float> lg;
  for (int i = 0; i < (int)toks.size(); ++i) {
    fwd.run(cache, {{toks[i], i, 0, true}}, lg);
    out.push_back(lg);
  }
  return out;
}

TEST(ForwardKQuant, LogitsMatchTheDequantizedTwin) {
  const std::string kpath = test::temp_dir() + "/tiny_kquant.gguf", fpath = test::temp_dir() + "/tiny_kquant_f32.gguf";
  test::write_tiny_model(kpath, kquant_spec(test::TinyKQuant::k_quants));
  test::write_tiny_model(fpath, kquant_spec(test::TinyKQuant::dequantized_f32));
  {  // the file really holds all three K-quant types, and the twin none
    std::set<GgmlType> ktypes, ftypes;
    GgufReader kr(kpath), fr(fpath);
    for (const auto& t : kr.tensors()) ktypes.insert(t.type);
    for (const auto& t : fr.tensors()) ftypes.insert(t.type);
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
      EXPECT_TRUE(ktypes.count(t)) << ggml_type_name((uint32_t)t);
      EXPECT_FALSE(ftypes.count(t)) << ggml_type_name((uint32_t)t);
    }
  }
  auto kmodel = Model::load(kpath), fmodel = Model::load(fpath);
  const ModelConfig& c = kmodel->config();
  const int T = 16;
  std::vector<int32_t> toks(T), toks2(T);
  for (int i = 0; i < T; ++i) toks[i] = (i * 37 + 11) % c.n_vocab, toks2[i] = (i * 53 + 7) % c.n_vocab;

  const auto want = decode_logits(*fmodel, toks), got = decode_logits(*kmodel, toks);
  double scale = 0, err = 0;
  for (int i = 0; i < T; ++i) {
    for (int v = 0; v < c.n_vocab; ++v) {
      scale = std::max(scale, (double)std::fabs(want[i][v]));
      err = std::max(err, (double)std::fabs(got[i][v] - want[i][v]));
    }
  }
  ASSERT_GT(scale, 0.1);
  EXPECT_LT(err / scale, kKQuantVsDequantizedRel) << "max abs err " << err << " of max |logit| " << scale;
  EXPECT_GT(err, 0.0) << "the K-quant model should carry activation-quantization error: same path as the twin?";
  std::printf("  K-quant vs dequantized-F32 twin: max |logit error| %.3g = %.2e of max |logit|\n", err, err / scale);

  // Prefill of all T tokens equals decode bit for bit, and so does a sequence decoded next to another.
  const KvDims dims{c.n_layer, c.n_head, c.n_head_kv, c.head_dim};
  Forward fwd(*kmodel);
  {
    F16KvCache cache(dims);
    std::vector<BatchToken> b;
    for (int i = 0; i < T; ++i) b.push_back({toks[i], i, 0, true});
    std::vector<float> lg;
    fwd.run(cache, b, lg);
    for (int i = 0; i < T; ++i)
      for (int v = 0; v < c.n_vocab; ++v)
        ASSERT_EQ(lg[(size_t)i * c.n_vocab + v], got[i][v]) << "prefill row " << i << " vs decode, logit " << v;
  }
  {
    F16KvCache cache(dims);
    std::vector<float> lg;
    for (int i = 0; i < T; ++i) {
      fwd.run(cache, {{toks2[i], i, 7, true}, {toks[i], i, 3, true}}, lg);
      for (int v = 0; v < c.n_vocab; ++v)
        ASSERT_EQ(lg[(size_t)c.n_vocab + v], got[i][v]) << "batched decode, token " << i << " logit " << v;
    }
  }
}

}  // namespace
}  // namespace mpkv
