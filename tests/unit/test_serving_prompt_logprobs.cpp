// RequestParams::prompt_logprobs (engine/request.h): with it the engine keeps the logits of every
// prompt position and returns each prompt token's log-probability (given the tokens before it)
// in the first event. Checked against a forward pass run here with logits at every position and
// a log-softmax written here, for a prompt prefilled over several steps beside another request
// (whose own tokens must not change), and for its range check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/engine.h"
#include "fixtures/tiny_model.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

namespace mpkv {
namespace {

struct Tiny {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

const Tiny& tiny() {
  static const Tiny t = [] {
    Tiny x;
    test::TinyModelSpec spec;
    spec.tied_output = false;
    x.model = test::load_tiny_model("prompt_logprobs_tiny", spec);
    x.tok = std::make_unique<Tokenizer>(Tokenizer::from_gguf(x.model->gguf()));
    return x;
  }();
  return t;
}

KvCacheOptions f16_pages() {
  KvCacheOptions o;
  o.page_tokens = 8;
  return o;
}

// log p(token | row) from one logits row, in double.
double log_softmax_at(const float* row, int n_vocab, int32_t token) {
  const double mx = *std::max_element(row, row + n_vocab);
  double sum = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(row[i] - mx);
  return row[token] - mx - std::log(sum);
}

// Logits at every prompt position, prefilled in chunks of 8 without the engine: [n, n_vocab].
std::vector<float> all_logits(const std::vector<int32_t>& p) {
  const Tiny& t = tiny();
  auto cache = make_kv_cache(f16_pages(), t.model->config().kv_dims());
  Forward fwd(*t.model);
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

RequestParams greedy(std::vector<int32_t> p, int max_tokens) {
  RequestParams r;
  r.prompt = std::move(p);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

std::vector<int32_t> prompt(int seed, int n) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 3 + (seed * 31 + i * 7) % 250;
  return p;
}
}  // namespace

TEST(ServingPromptLogprobs, EachPromptTokenGivenTheOnesBefore) {
  const Tiny& t = tiny();
  const int n_vocab = t.model->config().n_vocab;
  EngineOptions eo;
  eo.n_ctx = 128;
  eo.max_batch_tokens = 8;  // the 21-token prompt is prefilled over several steps
  Engine eng(*t.model, *t.tok, make_kv_cache(f16_pages(), t.model->config().kv_dims()), eo);
  const std::vector<int32_t> p = prompt(3, 21);
  std::map<uint64_t, std::vector<RequestOutput>> events;
  const auto collect = [&](const RequestOutput& o) { events[o.id].push_back(o); };
  RequestParams with = greedy(p, 3);
  with.prompt_logprobs = 2;
  const uint64_t a = eng.add_request(with, collect);
  const uint64_t b = eng.add_request(greedy(prompt(4, 13), 3), collect);   // shares the batches
  Engine alone_eng(*t.model, *t.tok, make_kv_cache(f16_pages(), t.model->config().kv_dims()), eo);
  std::vector<int32_t> alone;
  alone_eng.add_request(greedy(prompt(4, 13), 3), [&](const RequestOutput& o) { alone.insert(alone.end(), o.tokens.begin(), o.tokens.end()); });
  eng.run_until_idle();
  alone_eng.run_until_idle();

  ASSERT_EQ(events[a].size(), 3u);
  const std::vector<TokenLogprobs>& lps = events[a][0].prompt_logprobs;
  ASSERT_EQ(lps.size(), p.size() - 1);  // prompt tokens 1..20; the first has none
  const std::vector<float> ref = all_logits(p);
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
  // The request beside it: no prompt logprobs, and its tokens as when run alone.
  std::vector<int32_t> beside;
  for (const RequestOutput& o : events[b]) {
    EXPECT_TRUE(o.prompt_logprobs.empty());
    beside.insert(beside.end(), o.tokens.begin(), o.tokens.end());
  }
  EXPECT_EQ(beside, alone);
}

TEST(ServingPromptLogprobs, OutOfRangeIsRefused) {
  const Tiny& t = tiny();
  EngineOptions eo;
  eo.n_ctx = 64;
  Engine eng(*t.model, *t.tok, make_kv_cache(f16_pages(), t.model->config().kv_dims()), eo);
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

}  // namespace mpkv
