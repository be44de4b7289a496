// Reads the real default model: header, metadata, and the tensor table.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace mpkv
