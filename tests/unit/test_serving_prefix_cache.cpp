// The engine with the prefix cache (docs/serving.md "Prefix cache") on the tiny synthetic model:
//   - greedy output with the cache on equals the output with it off, bit for bit (tokens and
//     logprobs), for f16 on shared system prompts and multi-turn histories, and for quantized
//     caches on repeated prompts (pages never shrunk);
//   - cached_tokens: what a request read from the cache; the vLLM-named counters;
//   - two requests reading one prefix, one aborted mid-prefill: the other's tokens are unchanged;
//   - at the end every reference is gone and the pool holds exactly the cold cached bytes.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/engine.h"
#include "fixtures/engine_tiny.h"
#include "kvcache/kv_cache_factory.h"
#include "test_kvcache_inspection.h"

namespace mpkv {
namespace {

using Fixture = test::EngineTiny;
const Fixture& tiny() { return test::engine_tiny(); }

std::vector<int32_t> tokens(int seed, int n) { return test::engine_prompt(seed, n); }

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // of the sampled tokens
  int cached = 0;
  FinishReason reason = FinishReason::none;
};

// With the sampled token's logprob (top_logprobs 0).
RequestParams greedy(std::vector<int32_t> p, int max_tokens) {
  RequestParams r = test::greedy_request(std::move(p), max_tokens);
  r.top_logprobs = 0;
  return r;
}

KvCacheOptions cache_opts(KvMethod m, int bits, int window, int sink) {
  KvCacheOptions o;
  o.method = m;
  o.bits = bits;
  o.window = window;
  o.sink = sink;
  o.page_tokens = 8;
  o.budget_mib = 16;
  return o;
}

// Runs the prompts one after the other on one engine (each request finishes before the next
// arrives), the prompt of request i built from the answers before it.
class Session {
 public:
  Session(const KvCacheOptions& o, bool prefix_cache, int max_batch_tokens = 512) {
    EngineOptions e;
    e.n_ctx = 512;
    e.max_batch_tokens = max_batch_tokens;
    e.prefix_cache = prefix_cache;
    eng_ = std::make_unique<Engine>(*tiny().model, *tiny().tok, make_kv_cache(o, tiny().dims), e);
  }
  Answer ask(const std::vector<int32_t>& prompt, int max_tokens) {
    Answer a;
    eng_->add_request(greedy(prompt, max_tokens), [&a](const RequestOutput& o) {
      a.tokens.insert(a.tokens.end(), o.tokens.begin(), o.tokens.end());
      for (const TokenLogprobs& l : o.logprobs) a.logprobs.push_back(l.sampled.logprob);
      if (o.finished) {
        a.cached = o.stats.n_cached_prompt_tokens;
        a.reason = o.reason;
      }
    });
    eng_->run_until_idle();
    return a;
  }
  Engine& engine() { return *eng_; }

 private:
  std::unique_ptr<Engine> eng_;
};

// A shared system prompt, two users, and a second turn of the first conversation (its whole
// history, answer included, plus a new message).
std::vector<Answer> chat_workload(Session& s) {
  const auto system = tokens(1, 90);
  std::vector<Answer> out;
  const auto q1 = concat(system, tokens(2, 13));
  out.push_back(s.ask(q1, 20));
  out.push_back(s.ask(concat(system, tokens(3, 17)), 20));
  out.push_back(s.ask(concat(concat(q1, out[0].tokens), tokens(4, 11)), 20));
  out.push_back(s.ask(q1, 12));  // the first prompt again
  return out;
}

void expect_same(const std::vector<Answer>& on, const std::vector<Answer>& off, const char* what) {
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << what << " request " << i;
    EXPECT_EQ(on[i].logprobs, off[i].logprobs) << what << " request " << i << " (bit for bit)";
    EXPECT_EQ(off[i].cached, 0);
  }
}

TEST(ServingPrefixCache, F16OutputWithTheCacheEqualsWithoutBitForBit) {
  const KvCacheOptions o = cache_opts(KvMethod::f16, 16, 0, 0);
  Session on(o, true), off(o, false);
  const std::vector<Answer> a = chat_workload(on), b = chat_workload(off);
  expect_same(a, b, "f16");
  EXPECT_EQ(a[0].cached, 0);
  EXPECT_EQ(a[1].cached, 88) << "the system prompt's 11 full pages of 8";
  EXPECT_GE(a[2].cached, 96) << "the first turn's prompt and most of its answer";
  EXPECT_EQ(a[3].cached, 96) << "a repeated prompt of 103 tokens: 12 pages";
  const EngineMetrics m = on.engine().metrics();
  EXPECT_TRUE(m.prefix_cache_on);
  EXPECT_EQ(m.prefix_cache_queries_total, (uint64_t)(103 + 107 + (103 + 20 + 11) + 103));
  EXPECT_EQ(m.prefix_cache_hits_total, (uint64_t)(a[1].cached + a[2].cached + a[3].cached));
  EXPECT_EQ(m.kv_bytes_used, m.prefix_cache.cold_bytes) << "only cold cached pages remain";
  EXPECT_GT(m.prefix_cache.blocks, 0u);
  EXPECT_EQ(m.prefix_cache.blocks, m.prefix_cache.cold_blocks);
  EXPECT_FALSE(off.engine().metrics().prefix_cache_on);
  EXPECT_EQ(off.engine().metrics().prefix_cache_queries_total, 0u) << "nothing is looked up with the cache off";
  EXPECT_EQ(off.engine().metrics().kv_bytes_used, 0u);
}

// Quantized caches: a repeated prompt reads the first request's pages (never shrunk: no budget
// pressure). Its first queries past the match read those pages' codes where a cold run, decoding,
// reads fp16 rows (docs/numerics.md, "Prefill chunks"), so it may differ from the run without the
// cache; but every hit reads the same thing: the second and third requests (same prompt, same
// match) agree bit for bit over their common tokens, and the first (no hit) equals the cold run.
TEST(ServingPrefixCache, QuantizedRepeatedPromptHitsAgreeWithEachOther) {
  for (const KvMethod m : {KvMethod::kivi, KvMethod::uniform, KvMethod::turbo}) {
    KvCacheOptions o = cache_opts(m, m == KvMethod::kivi ? 2 : 4, 16, 1);
    o.page_tokens = 32;  // a multiple of KIVI's 32-token key groups
    Session on(o, true), off(o, false);
    const auto p = tokens(5, 120);
    std::vector<Answer> a, b;
    for (int max_tokens : {24, 17, 10}) {
      a.push_back(on.ask(p, max_tokens));
      b.push_back(off.ask(p, max_tokens));
    }
    expect_same({a[0]}, {b[0]}, kv_method_name(m));
    EXPECT_GT(a[1].cached, 64) << kv_method_name(m);
    EXPECT_EQ(a[1].cached, a[2].cached) << kv_method_name(m);
    ASSERT_EQ(a[2].tokens.size(), 10u) << kv_method_name(m);
    for (size_t i = 0; i < a[2].tokens.size(); ++i) {
      EXPECT_EQ(a[1].tokens[i], a[2].tokens[i]) << kv_method_name(m) << " token " << i;
      EXPECT_EQ(a[1].logprobs[i], a[2].logprobs[i]) << kv_method_name(m) << " token " << i << " (bit for bit)";
    }
    EXPECT_EQ(on.engine().cache().prefix_stats().cold_halvings, 0u);
  }
}

// Two requests read one cached prefix; one is aborted while its prompt is still being prefilled
// (steps of 8 tokens). The other's tokens are those it gets alone; the pages they shared stay.
TEST(ServingPrefixCache, AbortMidPrefillLeavesTheOtherReaderIntact) {
  const KvCacheOptions o = cache_opts(KvMethod::f16, 16, 0, 0);
  const auto system = tokens(6, 64);
  const auto keep = concat(system, tokens(7, 60)), drop = concat(system, tokens(8, 70));
  Answer alone;
  {
    Session s(o, false, 8);
    alone = s.ask(keep, 16);
  }
  Session s(o, true, 8);
  s.ask(concat(system, tokens(9, 5)), 4);  // caches the system prompt
  Answer kept;
  bool dropped_finished = false;
  FinishReason dropped_reason = FinishReason::none;
  Engine& eng = s.engine();
  eng.add_request(greedy(keep, 16), [&](const RequestOutput& out) {
    kept.tokens.insert(kept.tokens.end(), out.tokens.begin(), out.tokens.end());
    for (const TokenLogprobs& l : out.logprobs) kept.logprobs.push_back(l.sampled.logprob);
    if (out.finished) kept.cached = out.stats.n_cached_prompt_tokens;
  });
  const uint64_t victim = eng.add_request(greedy(drop, 16), [&](const RequestOutput& out) {
    if (out.finished) {
      dropped_finished = true;
      dropped_reason = out.reason;
    }
  });
  eng.step();
  eng.step();  // both read the cached system prompt; their own prompts are still prefilling
  eng.abort(victim);
  eng.run_until_idle();
  EXPECT_TRUE(dropped_finished);
  EXPECT_EQ(dropped_reason, FinishReason::abort);
  EXPECT_EQ(kept.cached, 64);
  EXPECT_EQ(kept.tokens, alone.tokens);
  EXPECT_EQ(kept.logprobs, alone.logprobs);
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.kv_bytes_used, m.prefix_cache.cold_bytes);
  EXPECT_EQ(eng.cache().prefix_pinned_bytes(), 0u);
  check_consistency(eng.cache());
}

// A request that asks for its prompt's logprobs computes every prompt position (vLLM's rule): it
// reads nothing from the cache, and gets the same logprobs as the first time.
TEST(ServingPrefixCache, PromptLogprobsRequestsComputeTheWholePrompt) {
  Session s(cache_opts(KvMethod::f16, 16, 0, 0), true);
  const auto p = tokens(10, 100);
  s.ask(p, 4);  // caches the prompt's pages
  std::vector<std::vector<TokenLogprobs>> got;
  for (int i = 0; i < 2; ++i) {
    RequestParams r = greedy(p, 4);
    r.prompt_logprobs = 0;
    int cached = -1;
    std::vector<TokenLogprobs> lps;
    s.engine().add_request(r, [&](const RequestOutput& o) {
      lps.insert(lps.end(), o.prompt_logprobs.begin(), o.prompt_logprobs.end());
      if (o.finished) cached = o.stats.n_cached_prompt_tokens;
    });
    s.engine().run_until_idle();
    EXPECT_EQ(cached, 0);
    ASSERT_EQ(lps.size(), p.size() - 1);
    got.push_back(lps);
  }
  for (size_t k = 0; k < got[0].size(); ++k) EXPECT_EQ(got[0][k].sampled.logprob, got[1][k].sampled.logprob) << k;
}

}  // namespace
}  // namespace mpkv
