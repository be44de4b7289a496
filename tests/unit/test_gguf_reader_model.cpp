// Reads the real default model: header, metadata, and the tensor table.
#include <gtest/gtest.h>

#include <vector>

#include "gguf/dequant.h"
#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

TEST(GgufReaderModel, OpensDefaultModelAndListsTensors) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "default model not present";
  GgufReader r(path);
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.tensors().size(), 272u);  // 30 layers x 9 + token_embd + output_norm
  EXPECT_EQ(r.get_string("general.architecture", ""), "llama");
  EXPECT_EQ(r.get_int("llama.block_count", 0), 30);
  EXPECT_EQ(r.get_int("llama.embedding_length", 0), 576);
  EXPECT_EQ(r.get_int("llama.attention.head_count", 0), 9);
  EXPECT_EQ(r.get_int("llama.attention.head_count_kv", 0), 3);
  EXPECT_EQ(r.get("tokenizer.ggml.tokens").as_array().size(), 49152u);

  const GgufTensorInfo& emb = r.tensor("token_embd.weight");
  EXPECT_EQ(emb.type, GgmlType::Q8_0);
  EXPECT_EQ(emb.dims, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(emb.n_bytes, size_t{49152} * (576 / 32) * 34);
  const GgufTensorInfo& q = r.tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.type, GgmlType::Q4_1);
  EXPECT_EQ(q.dims, (std::vector<int64_t>{576, 576}));
  EXPECT_EQ(r.find_tensor("no.such.tensor"), nullptr);
  EXPECT_THROW(r.tensor("no.such.tensor"), Error);
  EXPECT_THROW(r.get("no.such.key"), Error);
}

// Values below were produced with the python `gguf` package (gguf-py), independent of mpkv:
//   python3 -c "from gguf import GGUFReader; from gguf.quants import dequantize
//   r = GGUFReader('models/SmolLM2-135M-Instruct.Q4_1.gguf'); t = {x.name: x for x in r.tensors}
//   x = t['blk.0.attn_q.weight']; d = dequantize(x.data, x.tensor_type)   # shape [rows, 576]
//   print(['%.9g' % d[row, c] for c in (0, 1, 31, 32, 100, 575)], '%.17g' % d[row].astype('f8').sum())"
// (and the same for token_embd.weight). 9 significant digits round-trip a float exactly, and both
// sides compute d * q (+ m) in float, so single values must agree to the last bit; the row sums
// (accumulated in double on both sides, printed with 17 digits) differ only by the summation order:
// 576 terms of magnitude < 2 in double err by < 1e-12, so kRowSumTolerance leaves a wide margin.
constexpr double kRowSumTolerance = 1e-9;

struct PyRow {
  int64_t row;
  float v[6];      // at columns kCols
  double row_sum;  // float64 sum of the 576 values
};
constexpr int64_t kCols[6] = {0, 1, 31, 32, 100, 575};

void check_rows(const GgufReader& r, const std::string& name, const std::vector<PyRow>& rows) {
  const GgufTensorInfo& t = r.tensor(name);
  ASSERT_EQ(t.dims[0], 576);
  const size_t row_bytes = ggml_row_bytes(t.type, t.dims[0]);
  std::vector<float> y(576);
  for (const PyRow& pr : rows) {
    dequantize_row(t.type, t.data + pr.row * row_bytes, y.data(), 576);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[kCols[i]], pr.v[i]) << name << " row " << pr.row << " col " << kCols[i];
    double sum = 0;
    for (float v : y) sum += v;
    EXPECT_NEAR(sum, pr.row_sum, kRowSumTolerance) << name << " row " << pr.row;
  }
}

TEST(GgufReaderModel, DequantMatchesGgufPy) {
  const std::string path = test::default_model_path();
  if (path.empty()) GTEST_SKIP() << "default model not present";
  GgufReader r(path);
  check_rows(r, "blk.0.attn_q.weight",  // Q4_1
             {{0, {-0.0963134766f, 0.157348633f, -0.0963134766f, -0.346191406f, 0.214111328f, 0.123535156f}, 1.00726318359375},
              {1, {-0.11730957f, -0.11730957f, -0.11730957f, -0.299987793f, -0.139404297f, 0.47869873f}, -0.71209716796875},
              {575, {-0.156799316f, 0.154327393f, 0.589904785f, -0.111816406f, 0.181030273f, -0.255859375f}, -4.734954833984375}});
  check_rows(r, "token_embd.weight",  // Q8_0
             {{0, {-0.106544495f, 0.0329780579f, -0.200405121f, -0.0934867859f, 0.0531616211f, 0.0297546387f}, -2.2541093826293945},
              {1, {-0.0238037109f, -0.0158691406f, 1.00769043f, -0.0258331299f, -0.408163071f, -0.128437042f}, 0.35922718048095703},
              {12345, {0.0628795624f, -0.0560817719f, 0.203933716f, 0.146118164f, -0.0354309082f, -0.0971488953f}, 0.11264610290527344},
              {49151, {0.011505127f, 0.00575256348f, 0.730575562f, 0.0459594727f, -0.0269126892f, -0.0417022705f}, -0.46622085571289062}});
}

}  // namespace
}  // namespace mpkv
