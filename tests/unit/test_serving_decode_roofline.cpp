// The serving engine's decode-step counters (EngineMetrics::decode, engine/step_work.h; docs/serving.md
// "Roofline counters") against figures worked out here from the tiny model's shape, the GGUF's own
// tensor sizes and where each position sits in the cache (sink, pages, window), not from the code
// under test: which steps count, the weight bytes (once per step, however many tokens), the KV bytes
// by width with the fp16 rows apart, and the multiply-adds.
#include <gtest/gtest.h>

#include <regex>

#include "engine/engine.h"
#include "fixtures/engine_tiny.h"
#include "kvcache/kv_cache_factory.h"
#include "kvcache/paged_kv_cache.h"
#include "server/metrics.h"

namespace mpkv {
namespace {

const test::EngineTiny& tiny() { return test::engine_tiny(); }

RequestParams greedy(std::vector<int32_t> p, int max_tokens) { return test::greedy_request(std::move(p), max_tokens); }

// The GGUF bytes of the matrices a forward call multiplies: every layer's attention and FFN
// matrices and the (untied) output head; the embedding table and the norms are not multiplied.
uint64_t gguf_matrix_bytes(const Model& m) {
  const std::regex multiplied(
      R"(blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight|output\.weight)");
  uint64_t s = 0;
  for (const GgufTensorInfo& t : m.gguf().tensors())
    if (std::regex_match(t.name, multiplied)) s += t.n_bytes;
  return s;
}

// The tiny model (fixtures/tiny_model.h): 2 layers, d_model 64, 4 heads and 2 KV heads of 16,
// ffn 96, vocab 300, untied output. Weight multiply-adds per token: 2 x (64x64 + 32x64 + 32x64 +
// 64x64 + 3 x 96x64) + 300x64; attention of a query at pos: 2 layers x 4 heads x (pos + 1) rows x
// 16 x 2 (scores and weighted values).
constexpr uint64_t kWeightMacs = 2 * (64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 3 * 96 * 64) + 300 * 64;
uint64_t attention_macs_at(int pos) { return 2ull * 4 * (pos + 1) * 16 * 2; }
// One position's K and V of every layer at fp16: 2 layers x 2 KV heads x 16 x 2 bytes x (K, V).
constexpr uint64_t kFp16PositionBytes = 2 * 2 * 16 * 2 * 2;

// Two requests (prompts of 12 and 20 tokens, 6 tokens each) in 512-token steps: step 1 prefills
// both and samples their first tokens; steps 2-6 decode both, their tokens at positions 12-16 and
// 20-24. f16 pages (window 0, sink 0): every position is in a 16-bit page.
TEST(ServingDecodeRoofline, F16StepsCountWeightsOncePerStepAndEveryQuerysPages) {
  const auto& f = tiny();
  KvCacheOptions o;
  o.page_tokens = 8;
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), EngineOptions{});
  eng.add_request(greedy(test::engine_prompt(1, 12), 6), nullptr);
  eng.add_request(greedy(test::engine_prompt(2, 20), 6), nullptr);
  eng.run_until_idle();
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.steps_total, 6u);
  EXPECT_EQ(m.decode.steps, 5u) << "the prefill step is not a decode step";
  EXPECT_EQ(m.decode.tokens, 10u);
  EXPECT_GT(m.decode.seconds, 0.0);
  EXPECT_EQ(m.decode.work.weight_bytes, 5 * gguf_matrix_bytes(*f.model));
  uint64_t macs = 10 * kWeightMacs, kv = 0;
  for (int pos : {12, 13, 14, 15, 16, 20, 21, 22, 23, 24}) {
    macs += attention_macs_at(pos);
    kv += (pos + 1) * kFp16PositionBytes;
  }
  EXPECT_EQ(m.decode.work.macs, macs);
  EXPECT_EQ(m.decode.work.kv_page_bytes_by_bits, (std::map<int, uint64_t>{{16, kv}}));
  EXPECT_EQ(m.decode.work.kv_fp16_row_bytes, 0u);
}

// Steps that mix a prompt chunk with decode tokens are not decode steps: with 8-token steps, the
// second request's 20-token prompt shares steps with the first one's decoding.
TEST(ServingDecodeRoofline, StepsWithAPromptChunkAreNotCounted) {
  const auto& f = tiny();
  KvCacheOptions o;
  o.page_tokens = 8;
  EngineOptions e;
  e.max_batch_tokens = 8;
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), e);
  eng.add_request(greedy(test::engine_prompt(1, 4), 10), nullptr);
  eng.add_request(greedy(test::engine_prompt(2, 20), 3), nullptr);
  eng.run_until_idle();
  const EngineMetrics m = eng.metrics();
  EXPECT_LT(m.decode.tokens, m.forwarded_decode_tokens_total) << "decode tokens in mixed steps are left out";
  EXPECT_EQ(m.decode.work.weight_bytes, m.decode.steps * gguf_matrix_bytes(*f.model));
}

// Uniform pages of 8 tokens with a sink of 1 and an fp16 window of 4: a query at pos reads n = pos
// + 1 positions: 1 sink row and 4 window rows at fp16, the other n - 5 in pages (full ones and the
// open page's filled share: its bytes at each width x filled / 8). Keys and values at one width
// (4 bits), then at two (keys 2, values 4: every page holds blocks of both).
void expect_quantized_reads(int k_bits, int v_bits) {
  const auto& f = tiny();
  KvCacheOptions o;
  o.method = KvMethod::uniform;
  o.k_bits = k_bits;
  o.v_bits = v_bits;
  o.window = 4;
  o.sink = 1;
  o.page_tokens = 8;
  auto cache = make_kv_cache(o, f.dims);
  const KvByteModel bm = cache->byte_model();
  Engine eng(*f.model, *f.tok, std::move(cache), EngineOptions{});
  eng.add_request(greedy(test::engine_prompt(3, 20), 6), nullptr);
  eng.run_until_idle();
  const EngineMetrics m = eng.metrics();
  ASSERT_EQ(m.decode.steps, 5u);
  uint64_t rows = 0;
  std::map<int, uint64_t> pages;
  for (int pos = 20; pos <= 24; ++pos) {
    const int in_pages = pos + 1 - 5;
    rows += 5 * kFp16PositionBytes;
    for (int l = 0; l < 2; ++l) {
      std::map<int, uint64_t> page;  // one page's bytes by width: block b is a key when b is even
      for (int b = 0; b < bm.blocks_per_page(); ++b) {
        const int bits = b % 2 ? v_bits : k_bits;
        page[bits] += bm.block_bytes(l, b, bits);
      }
      for (const auto& [bits, bytes] : page) pages[bits] += bytes * (in_pages / 8) + bytes * (in_pages % 8) / 8;
    }
  }
  EXPECT_EQ(m.decode.work.kv_fp16_row_bytes, rows);
  EXPECT_EQ(m.decode.work.kv_page_bytes_by_bits, pages);
  EXPECT_EQ(pages.size(), k_bits == v_bits ? 1u : 2u);
}

TEST(ServingDecodeRoofline, QuantizedPagesAndFp16RowsAreCountedApart) { expect_quantized_reads(4, 4); }
TEST(ServingDecodeRoofline, PagesOfTwoWidthsAreCountedByWidth) { expect_quantized_reads(2, 4); }

// /metrics shows the totals exactly (byte totals pass num()'s 10 digits) and the probed limits.
TEST(ServingDecodeRoofline, MetricsExposeTheTotalsAndTheLimits) {
  server::ServerMetrics sm("m");
  EngineMetrics e;
  e.decode.steps = 3;
  e.decode.tokens = 7;
  e.decode.seconds = 0.25;
  e.decode.work.weight_bytes = 123456789012345ull;
  e.decode.work.kv_page_bytes_by_bits = {{2, 1000}, {16, 24}};
  e.decode.work.kv_fp16_row_bytes = 512;
  e.decode.work.macs = 98765432109876ull;
  const std::string before = sm.render(e);
  EXPECT_NE(before.find("mpkv:machine_read_bytes_per_second{model_name=\"m\"} 0\n"), std::string::npos) << before;
  sm.set_machine_limits({6.5e9, 8.7e11, 2});
  const std::string t = sm.render(e);
  for (const char* line : {"mpkv:decode_steps_total{model_name=\"m\"} 3",
                           "mpkv:decode_step_tokens_total{model_name=\"m\"} 7",
                           "mpkv:decode_step_seconds_total{model_name=\"m\"} 0.25",
                           "mpkv:decode_step_weight_bytes_total{model_name=\"m\"} 123456789012345",
                           "mpkv:decode_step_kv_bytes_total{bits=\"2\",model_name=\"m\"} 1000",
                           "mpkv:decode_step_kv_bytes_total{bits=\"16\",model_name=\"m\"} 24",
                           "mpkv:decode_step_kv_fp16_row_bytes_total{model_name=\"m\"} 512",
                           "mpkv:decode_step_macs_total{model_name=\"m\"} 98765432109876",
                           "mpkv:machine_read_bytes_per_second{model_name=\"m\"} 6500000000",
                           "mpkv:machine_int8_macs_per_second{model_name=\"m\"} 8.7e+11",
                           "mpkv:machine_probe_threads{model_name=\"m\"} 2"})
    EXPECT_NE(t.find(std::string(line) + "\n"), std::string::npos) << line << "\n---\n" << t;
}

}  // namespace
}  // namespace mpkv
