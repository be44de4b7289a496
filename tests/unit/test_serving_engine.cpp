// The serving engine (src/engine/engine.h) on a tiny synthetic model: a request's tokens against
// a plain prefill + greedy loop written here, batching invariance, admission by bytes, shrinking
// before preemption, preemption + recompute, abort, seeds, validation and threads.
//
// Tokens are compared exactly: a row's logits do not depend on the other rows of a step nor on the
// thread count (docs/numerics.md), so a request gets the same tokens alone, batched, prefilled in
// other chunks, or recomputed after a preemption. Most tests use steps of 8 tokens (many steps,
// many batch compositions); one uses the default 512.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <algorithm>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "fixtures/engine_tiny.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "test_support.h"

namespace mpkv {
namespace {

using Fixture = test::EngineTiny;
const Fixture& tiny() { return test::engine_tiny(); }

std::vector<int32_t> prompt(int seed, int n) { return test::engine_prompt(seed, n); }

KvCacheOptions f16_opts() {
  KvCacheOptions o;
  o.page_tokens = 8;
  return o;
}

// Greedy tokens written without the engine: prefill in chunks of 8, then one token at a time.
std::vector<int32_t> plain_greedy(const std::vector<int32_t>& p, int n_new, const KvCacheOptions& o) {
  const Fixture& f = tiny();
  auto cache = make_kv_cache(o, f.dims);
  Forward fwd(*f.model);
  const int n_vocab = f.model->config().n_vocab;
  std::vector<float> lg;
  for (size_t i = 0; i < p.size(); i += 8) {
    std::vector<BatchToken> b;
    for (size_t k = i; k < std::min(p.size(), i + 8); ++k) b.push_back({p[k], (int)k, 0, k + 1 == p.size()});
    EXPECT_TRUE(cache->reserve(0, (int)b.size()));
    fwd.run(*cache, b, lg);
  }
  std::vector<int32_t> out;
  int pos = (int)p.size();
  for (int i = 0; i < n_new; ++i) {
    out.push_back(argmax(lg.data(), n_vocab));
    if (i + 1 == n_new) break;
    EXPECT_TRUE(cache->reserve(0, 1));
    fwd.run(*cache, {{out.back(), pos++, 0, true}}, lg);
  }
  return out;
}

// What admission projects for a request of n positions: its pages and buffers, and the prefix
// cache's block records (on by default with a budget; scheduler.h).
size_t footprint(const PagedKvCache& c, int n) {
  return c.byte_model().sequence_bytes_bound(n) + c.byte_model().prefix_records_bound(n);
}

struct Collected {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::string> text;
  std::map<uint64_t, RequestOutput> final_event;
  int events_after_final = 0;
};

OutputCallback collect(Collected& c) {
  return [&c](const RequestOutput& o) {
    if (c.final_event.count(o.id)) c.events_after_final++;
    c.tokens[o.id].insert(c.tokens[o.id].end(), o.tokens.begin(), o.tokens.end());
    c.text[o.id] += o.text_delta;
    if (o.finished) c.final_event[o.id] = o;
  };
}

RequestParams greedy(std::vector<int32_t> p, int max_tokens) { return test::greedy_request(std::move(p), max_tokens); }

EngineOptions small_steps() {
  EngineOptions e;
  e.n_ctx = 256;
  e.max_batch_tokens = 8;
  e.max_seqs = 8;
  return e;
}

// A request run alone on a fresh engine: its tokens and finish reason.
std::pair<std::vector<int32_t>, FinishReason> run_alone(const RequestParams& r) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  const uint64_t id = eng.add_request(r, collect(c));
  eng.run_until_idle();
  return {c.tokens[id], c.final_event[id].reason};
}

TEST(ServingEngine, OneRequestMatchesAPlainGreedyLoop) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  const uint64_t id = eng.add_request(greedy(prompt(1, 21), 30), collect(c));
  eng.run_until_idle();
  EXPECT_EQ(c.tokens[id], plain_greedy(prompt(1, 21), 30, f16_opts()));
  std::set<int32_t> distinct(c.tokens[id].begin(), c.tokens[id].end());
  EXPECT_GE(distinct.size(), 5u) << "a model that repeats one token would make every comparison here weak";
  ASSERT_TRUE(c.final_event.count(id));
  EXPECT_EQ(c.final_event[id].reason, FinishReason::length);
  EXPECT_EQ(c.final_event[id].stats.n_generated, 30);
  EXPECT_EQ(c.final_event[id].stats.n_prompt_tokens, 21);
  EXPECT_EQ(c.events_after_final, 0);
  EXPECT_EQ(eng.metrics().kv_bytes_used, eng.metrics().prefix_cache.cold_bytes);  // only cold cached pages stay
  EXPECT_EQ(eng.metrics().running, 0);
}

TEST(ServingEngine, RequestsInOneBatchGetTheTokensTheyGetAlone) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  std::vector<uint64_t> ids;
  for (int s = 0; s < 5; ++s) ids.push_back(eng.add_request(greedy(prompt(s, 5 + 3 * s), 20 + s), collect(c)));
  int max_running = 0;
  while (eng.step()) max_running = std::max(max_running, eng.metrics().running);
  EXPECT_GT(max_running, 1) << "the requests ran together";
  for (int s = 0; s < 5; ++s) EXPECT_EQ(c.tokens[ids[s]], plain_greedy(prompt(s, 5 + 3 * s), 20 + s, f16_opts())) << s;
}

TEST(ServingEngine, WideStepsGiveTheSameTokensAsNarrowOnes) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), EngineOptions{});  // 512-token steps
  Collected c;
  std::vector<uint64_t> ids;
  for (int s = 0; s < 12; ++s) ids.push_back(eng.add_request(greedy(prompt(s, 30 + 5 * s), 16), collect(c)));
  eng.run_until_idle();
  for (int s = 0; s < 12; ++s) EXPECT_EQ(c.tokens[ids[s]], plain_greedy(prompt(s, 30 + 5 * s), 16, f16_opts())) << s;
}

TEST(ServingEngine, AdmitsByProjectedBytesAndNeverPreemptsWithinThem) {
  const Fixture& f = tiny();
  KvCacheOptions o = f16_opts();
  auto probe = make_kv_cache(o, f.dims);
  const int n_total = 12 + 40;
  const size_t two = 2 * footprint(*probe, n_total) + probe->byte_model().sequence_fixed_bytes() / 2;
  o.budget_mib = (double)two / (1024.0 * 1024.0);
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), small_steps());
  Collected c;
  for (int s = 0; s < 5; ++s) eng.add_request(greedy(prompt(s, 12), 40), collect(c));
  int max_running = 0;
  while (eng.step()) {
    const EngineMetrics m = eng.metrics();
    max_running = std::max(max_running, m.running);
    EXPECT_LE(m.kv_bytes_used, m.kv_budget_bytes);
  }
  EXPECT_EQ(max_running, 2) << "two projected footprints fit the budget, three do not";
  EXPECT_EQ(c.final_event.size(), 5u);
  for (const auto& [id, ev] : c.final_event) EXPECT_EQ(ev.reason, FinishReason::length);
  EXPECT_EQ(eng.metrics().preemptions_total, 0u);
  EXPECT_EQ(eng.metrics().kv_bytes_used, eng.metrics().prefix_cache.cold_bytes);  // only cold cached pages stay
}

TEST(ServingEngine, ProgressiveCacheShrinksInsteadOfPreempting) {
  const Fixture& f = tiny();
  KvCacheOptions o;
  o.method = KvMethod::progressive;
  o.bits = 2;
  o.window = 8;
  o.page_tokens = 8;
  auto probe = make_kv_cache(o, f.dims);
  const int n_total = 10 + 120;
  // Three sequences at their final bits fit; at 16 bits they would not.
  o.budget_mib = (double)(3 * footprint(*probe, n_total) + 1024) / (1024.0 * 1024.0);
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), small_steps());
  Collected c;
  for (int s = 0; s < 3; ++s) eng.add_request(greedy(prompt(s, 10), 120), collect(c));
  int max_running = 0;
  while (eng.step()) max_running = std::max(max_running, eng.metrics().running);
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(max_running, 3);
  EXPECT_EQ(m.preemptions_total, 0u);
  ASSERT_TRUE(m.page_shrinks.count({16, 8})) << "pages shrank under pressure";
  EXPECT_GT(m.page_shrinks.at({16, 8}), 0u);
  for (const auto& [id, ev] : c.final_event) EXPECT_EQ(ev.stats.n_generated, 120);
  EXPECT_EQ(m.kv_bytes_used, m.prefix_cache.cold_bytes);  // only cold cached pages stay
}

TEST(ServingEngine, PreemptedSequenceIsRecomputedToTheSameTokens) {
  const Fixture& f = tiny();
  KvCacheOptions o = f16_opts();
  auto probe = make_kv_cache(o, f.dims);
  const int n_total = 9 + 60;
  o.budget_mib = (double)(2 * footprint(*probe, n_total)) / (1024.0 * 1024.0);
  EngineOptions e = small_steps();
  e.admission_overcommit = 3.0;  // admits more than fits: the newest must give way
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), e);
  Collected c;
  std::vector<uint64_t> ids;
  for (int s = 0; s < 4; ++s) ids.push_back(eng.add_request(greedy(prompt(s, 9), 60), collect(c)));
  while (eng.step()) EXPECT_LE(eng.metrics().kv_bytes_used, eng.metrics().kv_budget_bytes);
  const EngineMetrics m = eng.metrics();
  EXPECT_GT(m.preemptions_total, 0u);
  int preempted = 0;
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(c.tokens[ids[s]], plain_greedy(prompt(s, 9), 60, o)) << "request " << s;
    preempted += c.final_event[ids[s]].stats.n_preemptions > 0;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(m.kv_bytes_used, m.prefix_cache.cold_bytes);  // only cold cached pages stay
}

TEST(ServingEngine, AbortFreesEveryByte) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  std::vector<uint64_t> ids;
  for (int s = 0; s < 3; ++s) ids.push_back(eng.add_request(greedy(prompt(s, 20), 100), collect(c)));
  for (int i = 0; i < 12; ++i) eng.step();
  EXPECT_GT(eng.metrics().kv_bytes_used, 0u);
  for (uint64_t id : ids) eng.abort(id);
  eng.abort(999);  // unknown: ignored
  eng.step();
  EXPECT_EQ(eng.metrics().kv_bytes_used, eng.metrics().prefix_cache.cold_bytes);  // only cold cached pages stay
  EXPECT_EQ(eng.metrics().running + eng.metrics().waiting, 0);
  for (uint64_t id : ids) {
    ASSERT_TRUE(c.final_event.count(id));
    EXPECT_EQ(c.final_event[id].reason, FinishReason::abort);
  }
  EXPECT_FALSE(eng.step());
}

// abort() from a request's own output callback (the server does so when a chat answer's first tool
// call is complete and parallel_tool_calls is false: FirstCallStop in src/server/completion.cpp)
// ends it at the next step, before another token: the final event counts exactly the tokens seen.
TEST(ServingEngine, AbortFromTheCallbackEndsBeforeTheNextToken) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  OutputCallback inner = collect(c);
  const uint64_t neighbour = eng.add_request(greedy(prompt(2, 12), 20), collect(c));
  const uint64_t id = eng.add_request(greedy(prompt(1, 12), 50), [&](const RequestOutput& o) {
    inner(o);
    if (!o.finished && c.tokens[o.id].size() == 3) eng.abort(o.id);
  });
  eng.run_until_idle();
  ASSERT_TRUE(c.final_event.count(id));
  EXPECT_EQ(c.final_event[id].reason, FinishReason::abort);
  EXPECT_EQ(c.tokens[id].size(), 3u);
  EXPECT_EQ(c.final_event[id].stats.n_generated, 3);
  EXPECT_EQ(c.events_after_final, 0);
  EXPECT_EQ(c.tokens[neighbour].size(), 20u);  // the batch's other request goes on
}

TEST(ServingEngine, SameSeedSameTokensDifferentSeedDifferentTokens) {
  const Fixture& f = tiny();
  auto run = [&](uint64_t seed) {
    Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
    Collected c;
    RequestParams r = greedy(prompt(3, 10), 40);
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.seed = seed;
    const uint64_t id = eng.add_request(r, collect(c));
    eng.add_request(greedy(prompt(4, 10), 40), collect(c));  // a neighbour in the batch
    eng.run_until_idle();
    return c.tokens[id];
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(ServingEngine, BadRequestsAreRejectedAndChangeNothing) {
  const Fixture& f = tiny();
  KvCacheOptions o = f16_opts();
  auto probe = make_kv_cache(o, f.dims);
  o.budget_mib = (double)footprint(*probe, 100) / (1024.0 * 1024.0);
  EngineOptions e = small_steps();
  e.max_queue = 2;
  Engine eng(*f.model, *f.tok, make_kv_cache(o, f.dims), e);
  Collected c;
  auto bad = [&](RequestParams r) { EXPECT_THROW(eng.add_request(std::move(r), collect(c)), Error); };
  bad(greedy({}, 5));                       // empty prompt
  bad(greedy(prompt(0, 256), 5));           // prompt fills the context
  bad(greedy({3, 4, 100000}, 5));           // token outside the vocabulary
  bad(greedy(prompt(0, 5), 0));             // max_tokens 0
  RequestParams r = greedy(prompt(0, 5), 5);
  r.sampling.top_p = 0.0f;
  bad(r);
  r = greedy(prompt(0, 5), 5);
  r.top_logprobs = kMaxTopLogprobs + 1;
  bad(r);
  bad(greedy(prompt(0, 50), 200));          // 250 tokens cannot fit a budget made for 100
  EXPECT_EQ(eng.metrics().waiting, 0);
  eng.add_request(greedy(prompt(0, 5), 5), collect(c));
  eng.add_request(greedy(prompt(1, 5), 5), collect(c));
  EXPECT_THROW(eng.add_request(greedy(prompt(2, 5), 5), collect(c)), QueueFull);
  EXPECT_EQ(eng.metrics().waiting, 2);
  eng.run_until_idle();
  EXPECT_EQ(c.final_event.size(), 2u);
}

TEST(ServingEngine, StopStringEndsTheRequestAndIsNotReturned) {
  const Fixture& f = tiny();
  // Find what the model says, then stop on a piece of it.
  Engine probe(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c0;
  const uint64_t id0 = probe.add_request(greedy(prompt(5, 8), 12), collect(c0));
  probe.run_until_idle();
  const std::string full = c0.text[id0];
  ASSERT_GE(full.size(), 6u);
  const std::string stop = full.substr(3, 2);
  const size_t cut = full.find(stop);
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  RequestParams r = greedy(prompt(5, 8), 12);
  r.stop = {stop};
  const uint64_t id = eng.add_request(r, collect(c));
  eng.run_until_idle();
  EXPECT_EQ(c.text[id], full.substr(0, cut));
  EXPECT_EQ(c.final_event[id].reason, FinishReason::stop);
}

// ignore_eos and min_tokens against end-of-generation tokens. Near-uniform sampling (temperature
// 1000) makes the tiny model emit its EOS now and then; a probe with ignore_eos finds a seed whose
// output holds an EOS at position j >= 2 (0-based). Sampling does not depend on the stop rules, so
// every run below draws the probe's tokens until it stops.
TEST(ServingEngine, IgnoreEosAndMinTokensHoldEndOfGenerationBack) {
  const Fixture& f = tiny();
  auto params = [&](uint64_t seed) {
    RequestParams r;
    r.prompt = prompt(3, 8);
    r.max_tokens = 120;
    r.sampling.temperature = 1000.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.seed = seed;
    return r;
  };
  auto run = run_alone;
  auto eog_positions = [&](const std::vector<int32_t>& t) {
    std::vector<size_t> v;
    for (size_t i = 0; i < t.size(); ++i)
      if (f.tok->is_end_of_generation(t[i])) v.push_back(i);
    return v;
  };
  uint64_t seed = 0;
  std::vector<int32_t> probe;
  std::vector<size_t> eog;
  for (uint64_t s = 1; s < 200 && eog.empty(); ++s) {
    RequestParams r = params(s);
    r.ignore_eos = true;
    auto [t, reason] = run(r);
    ASSERT_EQ(reason, FinishReason::length);  // ignore_eos: all 120 tokens
    ASSERT_EQ(t.size(), 120u);
    const std::vector<size_t> e = eog_positions(t);
    if (e.size() >= 2 && e[0] >= 2) seed = s, probe = t, eog = e;
  }
  ASSERT_FALSE(eog.empty()) << "no seed gave two EOS tokens; widen the search";
  const size_t j = eog[0];
  auto prefix = [&](size_t n) { return std::vector<int32_t>(probe.begin(), probe.begin() + n); };

  RequestParams r = params(seed);
  auto [plain, plain_reason] = run(r);  // EOS at j stops, the EOS itself counted
  EXPECT_EQ(plain, prefix(j + 1));
  EXPECT_EQ(plain_reason, FinishReason::stop);

  r.min_tokens = (int)j;  // j tokens came before the EOS: honored
  EXPECT_EQ(run(r).first, prefix(j + 1));

  r.min_tokens = (int)j + 1;  // not honored at j; the next EOS is
  auto [held, held_reason] = run(r);
  EXPECT_EQ(held, prefix(eog[1] + 1));
  EXPECT_EQ(held_reason, FinishReason::stop);

  r.min_tokens = 121;  // more than max_tokens
  EXPECT_THROW(run(r), Error);
}

// min_tokens holds stop strings back too: a stop string only in the text of the first 5 tokens
// ends the request without min_tokens and not with min_tokens = 6 (searched from token 6 on).
TEST(ServingEngine, MinTokensHoldsStopStringsBack) {
  const Fixture& f = tiny();
  Engine probe(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c0;
  const uint64_t id0 = probe.add_request(greedy(prompt(5, 8), 12), collect(c0));
  probe.run_until_idle();
  const std::string full = c0.text[id0];
  std::string head;  // text of the first 5 tokens
  for (int i = 0; i < 5; ++i) head += f.tok->token_piece(c0.tokens[id0][i]);
  ASSERT_EQ(full.compare(0, head.size(), head), 0);
  std::string stop;
  for (size_t len = 1; len <= 4 && stop.empty(); ++len)
    for (size_t p = 0; p + len <= head.size() && stop.empty(); ++p)
      if (full.find(head.substr(p, len), head.size() - len + 1) == std::string::npos) stop = head.substr(p, len);
  ASSERT_FALSE(stop.empty()) << "no stop string found only in the first 5 tokens' text";
  auto run = [&](int min_tokens) {
    Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
    Collected c;
    RequestParams r = greedy(prompt(5, 8), 12);
    r.stop = {stop};
    r.min_tokens = min_tokens;
    const uint64_t id = eng.add_request(r, collect(c));
    eng.run_until_idle();
    return std::make_pair(c.text[id], c.final_event[id].reason);
  };
  EXPECT_EQ(run(0), std::make_pair(full.substr(0, full.find(stop)), FinishReason::stop));
  EXPECT_EQ(run(6), std::make_pair(full, FinishReason::length));
}

TEST(ServingEngine, LogprobsAreLogSoftmaxOfTheLogits) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  std::vector<RequestOutput> events;
  RequestParams r = greedy(prompt(6, 8), 4);
  r.top_logprobs = 3;
  eng.add_request(r, [&](const RequestOutput& o) { events.push_back(o); });
  eng.run_until_idle();
  ASSERT_EQ(events.size(), 4u);
  for (const RequestOutput& o : events) {
    ASSERT_EQ(o.logprobs.size(), 1u);
    const TokenLogprobs& lp = o.logprobs[0];
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].token, o.tokens[0]) << "greedy picks the most likely token";
    EXPECT_FLOAT_EQ(lp.top[0].logprob, lp.sampled.logprob);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
    EXPECT_GE(lp.top[1].logprob, lp.top[2].logprob);
    EXPECT_LE(lp.top[0].logprob, 0.0f);
  }
}

TEST(ServingEngine, RequestsFromOtherThreadsWhileAnotherSteps) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  std::atomic<int> finished{0};
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) {
      if (eng.wait_for_work(std::chrono::milliseconds(20))) eng.step();
    }
  });
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i)
        eng.add_request(greedy(prompt(t * 3 + i, 6), 8), [&](const RequestOutput& o) { finished += o.finished; });
    });
  }
  for (auto& c : clients) c.join();
  for (int i = 0; i < 1000 && finished < 12; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  loop.join();
  EXPECT_EQ(finished.load(), 12);
  EXPECT_EQ(eng.metrics().kv_bytes_used, eng.metrics().prefix_cache.cold_bytes);  // only cold cached pages stay
}


// llama.cpp feeds the prompt into the repetition-penalty history (llama-cli and llama-server accept
// every prompt token into the sampler), so the first generated token is already penalized for
// repeating the prompt. The reference applies the penalty by hand to the plain loop's logits.
TEST(ServingEngine, RepeatPenaltyCountsThePromptTokens) {
  const Fixture& f = tiny();
  const int n_vocab = f.model->config().n_vocab;
  const float penalty = 50.0f;
  // A prompt whose unpenalized greedy continuation repeats one of its own tokens, so the penalty
  // must change the answer (found by search; the assertion keeps the test from going weak).
  std::vector<int32_t> p;
  std::vector<float> lg;
  for (int seed = 0; seed < 64 && p.empty(); ++seed) {
    std::vector<int32_t> cand = prompt(seed, 40);
    auto cache = make_kv_cache(f16_opts(), f.dims);
    Forward fwd(*f.model);
    std::vector<BatchToken> b;
    for (size_t k = 0; k < cand.size(); ++k) b.push_back({cand[k], (int)k, 0, k + 1 == cand.size()});
    ASSERT_TRUE(cache->reserve(0, (int)b.size()));
    fwd.run(*cache, b, lg);
    if (std::count(cand.begin(), cand.end(), argmax(lg.data(), n_vocab))) p = cand;
  }
  ASSERT_FALSE(p.empty()) << "no prompt among 64 repeats itself; pick another search";
  const int32_t unpenalized = argmax(lg.data(), n_vocab);
  std::set<int32_t> seen(p.begin(), p.end());
  for (int32_t t : seen) lg[t] = lg[t] > 0 ? lg[t] / penalty : lg[t] * penalty;
  const int32_t expected = argmax(lg.data(), n_vocab);
  ASSERT_NE(expected, unpenalized);

  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  Collected c;
  RequestParams r = greedy(p, 1);
  r.sampling.repeat_penalty = penalty;
  r.sampling.repeat_last_n = 64;  // covers the whole prompt
  const uint64_t id = eng.add_request(r, collect(c));
  eng.run_until_idle();
  ASSERT_EQ(c.tokens[id].size(), 1u);
  EXPECT_EQ(c.tokens[id][0], expected);
}

// stop_token_ids end the request like an end-of-generation token (the token counted, its text not
// shown), and min_tokens holds them back the same way.
TEST(ServingEngine, StopTokenIdsEndTheRequest) {
  auto run = run_alone;
  const std::vector<int32_t> all = run(greedy(prompt(4, 12), 40)).first;
  ASSERT_EQ(all.size(), 40u);
  // A token that occurs at least twice, first after position 2.
  size_t first = 0, second = 0;
  for (size_t i = 3; i < all.size() && !second; ++i) {
    auto again = std::find(all.begin() + (long)i + 1, all.end(), all[i]);
    if (std::find(all.begin(), all.begin() + (long)i, all[i]) == all.begin() + (long)i && again != all.end())
      first = i, second = (size_t)(again - all.begin());
  }
  ASSERT_GT(second, 0u) << "the greedy continuation never repeats a token; pick another prompt";
  RequestParams r = greedy(prompt(4, 12), 40);
  r.stop_token_ids = {all[first]};
  auto [stopped, reason] = run(r);
  EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), all.begin() + (long)first + 1));
  EXPECT_EQ(reason, FinishReason::stop);
  r.min_tokens = (int)first + 1;
  EXPECT_EQ(run(r).first, std::vector<int32_t>(all.begin(), all.begin() + (long)second + 1));
}

// With one request running at a time, waiting requests start by priority (lower first), then by
// arrival.
TEST(ServingEngine, PriorityOrdersTheWaitingQueue) {
  const Fixture& f = tiny();
  EngineOptions o = small_steps();
  o.max_seqs = 1;
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), o);
  std::vector<int> finished;
  auto add = [&](int tag, int priority) {
    RequestParams r = greedy(prompt(tag, 6), 3);
    r.priority = priority;
    eng.add_request(r, [&finished, tag](const RequestOutput& out) {
      if (out.finished) finished.push_back(tag);
    });
  };
  add(1, 0);
  add(2, 5);
  add(3, 0);
  add(4, -1);
  add(5, 5);
  eng.run_until_idle();
  EXPECT_EQ(finished, (std::vector<int>{4, 1, 3, 2, 5}));
}


// RequestParams::prompt_logprobs: the engine keeps every prompt position's logits and returns each
// prompt token's log-probability (given the ones before it) in the first event. Checked against
// a forward pass with logits at every position and a log-softmax written here, for a prompt
// prefilled over several steps beside another request, whose own tokens must not change.
double log_softmax_at(const float* row, int n_vocab, int32_t token) {
  const double mx = *std::max_element(row, row + n_vocab);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(row[i] - mx);
  return row[token] - mx - std::log(sum);
}

// Logits at every prompt position, prefilled in chunks of 8 without the engine: [n, n_vocab].
std::vector<float> every_position_logits(const std::vector<int32_t>& p) {
  const Fixture& f = tiny();
  auto cache = make_kv_cache(f16_opts(), f.dims);
  Forward fwd(*f.model);
  std::vector<float> all, lg;
  for (size_t i = 0; i < p.size(); i += 8) {
    std::vector<BatchToken> b;
    for (size_t k = i; k < std::min(p.size(), i + 8); ++k) b.push_back({p[k], (int)k, 0, true});
    EXPECT_TRUE(cache->reserve(0, (int)b.size()));
    fwd.run(*cache, b, lg);
    all.insert(all.end(), lg.begin(), lg.end());
  }
  return all;
}

TEST(ServingEngine, PromptLogprobsGiveEachPromptTokenTheOnesBefore) {
  const Fixture& f = tiny();
  const int n_vocab = f.model->config().n_vocab;
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());  // 8 tokens a step
  const std::vector<int32_t> p = prompt(3, 21);
  std::map<uint64_t, std::vector<RequestOutput>> events;
  const auto keep = [&](const RequestOutput& o) { events[o.id].push_back(o); };
  RequestParams with = greedy(p, 3);
  with.prompt_logprobs = 2;
  const uint64_t a = eng.add_request(with, keep);
  const uint64_t b = eng.add_request(greedy(prompt(4, 13), 3), keep);  // shares the batches
  eng.run_until_idle();

  ASSERT_EQ(events[a].size(), 3u);
  const std::vector<TokenLogprobs>& lps = events[a][0].prompt_logprobs;
  ASSERT_EQ(lps.size(), p.size() - 1);  // prompt tokens 1..20; the first has none
  const std::vector<float> ref = every_position_logits(p);
  for (size_t k = 1; k < p.size(); ++k) {
    SCOPED_TRACE(k);
    const float* row = ref.data() + (k - 1) * n_vocab;
    const TokenLogprobs& lp = lps[k - 1];
    EXPECT_EQ(lp.sampled.token, p[k]);
    EXPECT_NEAR(lp.sampled.logprob, log_softmax_at(row, n_vocab, p[k]), 1e-3);
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].token, std::max_element(row, row + n_vocab) - row);
    EXPECT_NEAR(lp.top[0].logprob, log_softmax_at(row, n_vocab, lp.top[0].token), 1e-3);
    EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
  }
  for (size_t i = 1; i < events[a].size(); ++i) EXPECT_TRUE(events[a][i].prompt_logprobs.empty());
  std::vector<int32_t> beside;
  for (const RequestOutput& o : events[b]) {
    EXPECT_TRUE(o.prompt_logprobs.empty());
    beside.insert(beside.end(), o.tokens.begin(), o.tokens.end());
  }
  EXPECT_EQ(beside, run_alone(greedy(prompt(4, 13), 3)).first);
}

TEST(ServingEngine, PromptLogprobsOutOfRangeAreRefused) {
  const Fixture& f = tiny();
  Engine eng(*f.model, *f.tok, make_kv_cache(f16_opts(), f.dims), small_steps());
  RequestParams r = greedy(prompt(1, 5), 2);
  for (int bad : {-2, kMaxTopLogprobs + 1}) {
    r.prompt_logprobs = bad;
    EXPECT_THROW(eng.add_request(r, [](const RequestOutput&) {}), Error) << bad;
  }
  r.prompt_logprobs = 0;  // the prompt tokens' own logprobs, no alternatives
  std::vector<TokenLogprobs> got;
  eng.add_request(r, [&](const RequestOutput& o) {
    if (!o.prompt_logprobs.empty()) got = o.prompt_logprobs;
  });
  eng.run_until_idle();
  ASSERT_EQ(got.size(), 4u);
  for (const TokenLogprobs& lp : got) EXPECT_TRUE(lp.top.empty());
}

}  // namespace
}  // namespace mpkv
