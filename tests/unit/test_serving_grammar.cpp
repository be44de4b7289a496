// Structured outputs in the serving engine (docs/structured_outputs.md) on the tiny synthetic
// model: a constrained greedy request against a plain loop that takes the argmax over the allowed
// tokens (written here), the stop token only where the grammar ends, max_tokens inside the grammar,
// sampled choices each with its own matcher, an unconstrained neighbour untouched, a grammar that
// starts after a thinking tag (forced by the budget, or the model's own), validation and the metrics;
// check-first sampling against full masks (greedy: the same tokens), where it applies, and its
// counters on /metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "engine/engine.h"
#include "fixtures/engine_tiny.h"
#include "grammar/grammar_compiler.h"
#include "kvcache/kv_cache_factory.h"
#include "model/forward.h"
#include "server/metrics.h"

namespace mpkv {
namespace {

const test::EngineTiny& tiny() { return test::engine_tiny(); }
int n_vocab() { return tiny().model->config().n_vocab; }
int32_t eos() { return tiny().tok->eos(); }

GrammarCompiler& compiler() {
  static GrammarCompiler c(*tiny().tok, n_vocab());
  return c;
}

KvCacheOptions f16_opts() {
  KvCacheOptions o;
  o.page_tokens = 8;
  return o;
}

EngineOptions small_steps() {
  EngineOptions e;
  e.n_ctx = 256;
  e.max_batch_tokens = 8;
  e.max_seqs = 8;
  return e;
}

struct Outputs {
  std::map<uint64_t, std::vector<int32_t>> tokens;
  std::map<uint64_t, std::string> text;
  std::map<uint64_t, FinishReason> reason;
};
OutputCallback collect(Outputs& r) {
  return [&r](const RequestOutput& o) {
    r.tokens[o.id].insert(r.tokens[o.id].end(), o.tokens.begin(), o.tokens.end());
    r.text[o.id] += o.text_delta;
    if (o.finished) r.reason[o.id] = o.reason;
  };
}

RequestParams request(int seed, int max_tokens, const Constraint* c, float temperature = 0.0f) {
  RequestParams p;
  p.prompt = test::engine_prompt(seed, 9);
  p.max_tokens = max_tokens;
  p.sampling.temperature = temperature;
  p.sampling.seed = 1000 + seed;
  if (c) p.grammar = compiler().compile(*c);
  return p;
}

// Greedy over a fixed allowed set per step, without the engine: the argmax of the logits among
// `allowed(step)`.
std::vector<int32_t> plain_constrained_greedy(const std::vector<int32_t>& p, int n_new,
                                              const std::function<std::set<int32_t>(int)>& allowed) {
  const test::EngineTiny& f = tiny();
  auto cache = make_kv_cache(f16_opts(), f.dims);
  Forward fwd(*f.model);
  std::vector<float> lg;
  std::vector<BatchToken> b;
  for (size_t k = 0; k < p.size(); ++k) b.push_back({p[k], (int)k, 0, k + 1 == p.size()});
  EXPECT_TRUE(cache->reserve(0, (int)b.size()));
  fwd.run(*cache, b, lg);
  std::vector<int32_t> out;
  for (int i = 0; i < n_new; ++i) {
    int32_t best = -1;
    for (int32_t t : allowed(i))
      if (best < 0 || lg[t] > lg[best]) best = t;
    out.push_back(best);
    if (i + 1 == n_new) break;
    EXPECT_TRUE(cache->reserve(0, 1));
    fwd.run(*cache, {{best, (int)(p.size() + i), 0, true}}, lg);
  }
  return out;
}

TEST(ServingGrammar, GreedyIsTheArgmaxOverAllowedTokensThenTheStopToken) {
  const Constraint c{ConstraintKind::regex, "[ab]{6}"};
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  const uint64_t id = eng.add_request(request(1, 50, &c), collect(r));
  eng.run_until_idle();
  const auto expected = plain_constrained_greedy(test::engine_prompt(1, 9), 7, [](int i) {
    return i < 6 ? std::set<int32_t>{'a', 'b'} : std::set<int32_t>{eos()};
  });
  EXPECT_EQ(r.tokens[id], expected);
  EXPECT_EQ(r.reason[id], FinishReason::stop);
  EXPECT_EQ(r.text[id].size(), 6u);
  EXPECT_EQ(r.text[id].find_first_not_of("ab"), std::string::npos) << r.text[id];
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.constrained_requests_total, 1u);
  // Every generated token drew without its mask first (greedy: check-first); a mask for each refused.
  EXPECT_EQ(m.grammar_check_first_rows_total, 7u);
  EXPECT_EQ(m.grammar_mask_rows_total + m.grammar_mask_skipped_rows_total, 7u);
  EXPECT_GT(m.grammar_mask_rows_total, 0u);
  EXPECT_GT(m.grammar_mask_seconds_total, 0.0);
}

EngineOptions full_masks(EngineOptions o) {
  o.grammar_check_first = false;
  return o;
}

// Check-first sampling (docs/structured_outputs.md, "Masks in the engine") against full masks:
// greedy requests under several constraints (a maxLength schema among them), with penalties, a logit
// bias, logprobs and a stop token id, give the same tokens, logprobs and ends both ways, and both of
// check-first's branches run (a draw the grammar takes: the biased 'a' inside a string; one it
// refuses: 'a' where the grammar wants a quote, a bracket or the stop token).
TEST(ServingGrammar, CheckFirstGreedyEqualsFullMasks) {
  struct Case {
    Constraint c;
    std::vector<std::pair<int32_t, float>> bias;
  };
  std::vector<Case> cases;
  cases.push_back({Constraint{ConstraintKind::regex, "[ab]{6}"}, {}});
  cases.push_back({Constraint{ConstraintKind::json_schema,
                    R"({"type": "object", "properties": {"w": {"type": "array", "items": {"type": "string", "maxLength": 4}, "minItems": 2, "maxItems": 3}}, "required": ["w"]})"},
                   {{'a', 30.0f}}});
  cases.push_back({Constraint{ConstraintKind::json_schema,
                    R"({"type": "object", "properties": {"n": {"type": "integer"}, "s": {"enum": ["x", "yy"]}}, "required": ["n", "s"]})"},
                   {{'7', 30.0f}, {eos(), 5.0f}}});
  cases.push_back({choice_constraint({"alpha", "beta", "gamma"}), {{'a', 30.0f}}});
  cases.push_back({Constraint{ConstraintKind::json_object, ""}, {}});
  cases.push_back({Constraint{ConstraintKind::regex, "[a-z]{2,12}"}, {{'q', 30.0f}}});
  auto run = [&](bool check_first) {
    EngineOptions o = small_steps();
    if (!check_first) o = full_masks(o);
    Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), o);
    std::vector<std::vector<int32_t>> tokens(cases.size());
    std::vector<std::vector<TokenLogprobs>> lps(cases.size());
    std::vector<FinishReason> reasons(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      RequestParams p = request(20 + (int)i, 24, &cases[i].c);
      p.sampling.logit_bias = cases[i].bias;
      p.sampling.repeat_penalty = 1.1f;
      p.sampling.presence_penalty = i % 2 ? 0.5f : 0.0f;
      p.stop_token_ids = {'!'};
      p.top_logprobs = i == 1 ? 3 : -1;
      eng.add_request(p, [&, i](const RequestOutput& out) {
        tokens[i].insert(tokens[i].end(), out.tokens.begin(), out.tokens.end());
        lps[i].insert(lps[i].end(), out.logprobs.begin(), out.logprobs.end());
        if (out.finished) reasons[i] = out.reason;
      });
    }
    eng.run_until_idle();
    return std::make_tuple(tokens, lps, reasons, eng.metrics());
  };
  const auto [t_check, lp_check, r_check, m_check] = run(true);
  const auto [t_full, lp_full, r_full, m_full] = run(false);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(t_check[i], t_full[i]) << cases[i].c.text;
    EXPECT_EQ(r_check[i], r_full[i]) << cases[i].c.text;
    ASSERT_EQ(lp_check[i].size(), lp_full[i].size());
    for (size_t k = 0; k < lp_check[i].size(); ++k) {
      EXPECT_EQ(lp_check[i][k].sampled.token, lp_full[i][k].sampled.token);
      EXPECT_EQ(lp_check[i][k].sampled.logprob, lp_full[i][k].sampled.logprob);
      EXPECT_EQ(lp_check[i][k].top.size(), lp_full[i][k].top.size());
    }
  }
  EXPECT_EQ(r_check[0], FinishReason::stop);
  EXPECT_EQ(lp_check[1].size(), t_check[1].size());
  // Full masks: one per constrained row, nothing checked first.
  EXPECT_EQ(m_full.grammar_check_first_rows_total, 0u);
  EXPECT_EQ(m_full.grammar_mask_skipped_rows_total, 0u);
  // Check-first: every row drew first; some were taken, some refused, and the refused ones are the
  // masks filled.
  EXPECT_EQ(m_check.grammar_check_first_rows_total, m_full.grammar_mask_rows_total);
  EXPECT_GT(m_check.grammar_mask_skipped_rows_total, 10u);
  EXPECT_GT(m_check.grammar_mask_rows_total, 10u);
  EXPECT_EQ(m_check.grammar_mask_rows_total + m_check.grammar_mask_skipped_rows_total, m_full.grammar_mask_rows_total);
}

// Temperature without cuts checks first; with top-p (or top-k, min-p) every row fills its mask. The
// answers are valid either way.
TEST(ServingGrammar, SampledChecksFirstOnlyWithoutCuts) {
  const std::vector<std::string> choices = {"alpha", "beta", "gamma", "al"};
  const Constraint c = choice_constraint(choices);
  for (bool cuts : {false, true}) {
    Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
    Outputs r;
    std::vector<uint64_t> ids;
    for (int s = 0; s < 4; ++s) {
      RequestParams p = request(30 + s, 40, &c, 1.0f);
      p.sampling.top_k = 0;
      p.sampling.top_p = cuts ? 0.9f : 1.0f;
      p.sampling.logit_bias = {{'a', 8.0f}, {'l', 8.0f}};  // drawn unmasked often enough to be taken
      ids.push_back(eng.add_request(p, collect(r)));
    }
    eng.run_until_idle();
    for (uint64_t id : ids) {
      EXPECT_EQ(r.reason[id], FinishReason::stop);
      EXPECT_TRUE(std::count(choices.begin(), choices.end(), r.text[id])) << r.text[id];
    }
    const EngineMetrics m = eng.metrics();
    if (cuts) {
      EXPECT_EQ(m.grammar_check_first_rows_total, 0u);
    } else {
      EXPECT_EQ(m.grammar_check_first_rows_total, m.grammar_mask_rows_total + m.grammar_mask_skipped_rows_total);
      EXPECT_GT(m.grammar_mask_skipped_rows_total, 0u);
    }
  }
}

// A grammar whose rules carry token budgets never checks first (TokenMatcher::accepts_before_mask).
TEST(ServingGrammar, TokenBudgetsTakeFullMasks) {
  const Constraint c{ConstraintKind::grammar, "root ::= r \"!\"\nr[max_tokens=3] ::= [ab]+"};
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  const uint64_t id = eng.add_request(request(6, 30, &c), collect(r));
  eng.run_until_idle();
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.grammar_check_first_rows_total, 0u);
  EXPECT_EQ(m.grammar_mask_rows_total, r.tokens[id].size());
}

// /metrics exports the check-first counters (docs/structured_outputs.md, "Metrics").
TEST(ServingGrammar, MetricsExportTheCheckFirstCounters) {
  const Constraint c{ConstraintKind::regex, "[ab]{6}"};
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  RequestParams p = request(1, 50, &c);
  p.sampling.logit_bias = {{'b', 30.0f}};  // every letter taken; the stop token refused once
  eng.add_request(p, collect(r));
  eng.run_until_idle();
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.grammar_check_first_rows_total, 7u);
  EXPECT_EQ(m.grammar_mask_skipped_rows_total, 6u);
  EXPECT_EQ(m.grammar_mask_rows_total, 1u);
  const std::string t = server::ServerMetrics("m").render(m);
  for (const char* line : {"mpkv:grammar_check_first_rows_total{model_name=\"m\"} 7",
                           "mpkv:grammar_mask_skipped_rows_total{model_name=\"m\"} 6",
                           "mpkv:grammar_mask_rows_total{model_name=\"m\"} 1"})
    EXPECT_NE(t.find(std::string(line) + "\n"), std::string::npos) << line << "\n---\n" << t;
}

TEST(ServingGrammar, MaxTokensInsideTheGrammarEndsWithLength) {
  const Constraint c{ConstraintKind::json_schema, R"({"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"]})"};
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  const uint64_t id = eng.add_request(request(2, 4, &c), collect(r));
  eng.run_until_idle();
  EXPECT_EQ(r.reason[id], FinishReason::length);
  EXPECT_EQ(r.text[id], "{\"k\"");  // the only way a 4-token (4-byte) start of this object can go
}

// Sampled requests with one shared compiled grammar: each has its own matcher, each answer is one
// of the choices, and an unconstrained request in the same steps gets the tokens it gets alone.
TEST(ServingGrammar, SampledChoicesEachWithItsOwnMatcherBesideAnUnconstrainedRequest) {
  const std::vector<std::string> choices = {"alpha", "beta", "gamma", "al"};
  const Constraint c = choice_constraint(choices);
  auto run = [&](bool with_constrained) {
    Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
    Outputs r;
    std::vector<uint64_t> ids;
    if (with_constrained)
      for (int s = 0; s < 6; ++s) ids.push_back(eng.add_request(request(s, 40, &c, 1.5f), collect(r)));
    RequestParams free = request(9, 12, nullptr, 0.0f);
    free.ignore_eos = true;
    ids.push_back(eng.add_request(free, collect(r)));
    eng.run_until_idle();
    return std::make_pair(r, ids);
  };
  auto [r, ids] = run(true);
  std::set<std::string> seen;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    EXPECT_EQ(r.reason[ids[i]], FinishReason::stop);
    EXPECT_TRUE(std::count(choices.begin(), choices.end(), r.text[ids[i]])) << r.text[ids[i]];
    seen.insert(r.text[ids[i]]);
  }
  EXPECT_GE(seen.size(), 2u) << "six sampled requests at temperature 1.5 all chose the same answer";
  auto [alone, alone_ids] = run(false);
  EXPECT_EQ(r.tokens[ids.back()], alone.tokens[alone_ids.back()]);
}

// Every token but the ones that end the output (the gate's mask while closed).
std::set<int32_t> all_but_ending() {
  std::set<int32_t> s;
  for (int32_t t = 0; t < n_vocab(); ++t) s.insert(t);
  for (int32_t t : tiny().tok->end_of_generation_ids()) s.erase(t);
  return s;
}

// A prompt that opened a thinking block (grammar_gate.h): the tokens up to the end tag are free but
// never the end of generation (a +100 bias on EOS would otherwise end the output at once), the
// grammar starts right after the tag, and its end is the first place EOS may come. Here the thinking
// budget forces the two-token tag after 4 free tokens (reasoning_budget.h).
TEST(ServingGrammar, GrammarStartsAfterTheForcedThinkingTag) {
  const Constraint c{ConstraintKind::regex, "[ab]{6}"};
  const std::vector<int32_t> tag = {'#', '%'};
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  RequestParams p = request(4, 60, &c);
  p.sampling.logit_bias = {{eos(), 100.0f}};
  p.grammar_after = tag;
  p.reasoning_budget.budget = 4;
  p.reasoning_budget.end = tag;
  p.reasoning_budget.starts_inside = true;
  const uint64_t id = eng.add_request(p, collect(r));
  eng.run_until_idle();
  const std::set<int32_t> free = all_but_ending();
  const auto expected = plain_constrained_greedy(test::engine_prompt(4, 9), 13, [&](int i) {
    if (i < 4) return free;
    if (i < 6) return std::set<int32_t>{tag[i - 4]};  // forced
    return i < 12 ? std::set<int32_t>{'a', 'b'} : std::set<int32_t>{eos()};
  });
  EXPECT_EQ(r.tokens[id], expected);
  EXPECT_EQ(r.reason[id], FinishReason::stop);
  EXPECT_EQ(r.text[id].substr(r.text[id].size() - 6).find_first_not_of("ab"), std::string::npos) << r.text[id];
  // The grammar's rows: 6 letters and the stop, each drawn without its mask first (none forced past
  // the gate); the refused ones filled their masks.
  const EngineMetrics m = eng.metrics();
  EXPECT_EQ(m.grammar_check_first_rows_total, 7u);
  EXPECT_EQ(m.grammar_mask_rows_total + m.grammar_mask_skipped_rows_total, 7u);
}

// The tag written by the model itself: the grammar starts after its first occurrence. The tag is
// a token greedy decoding picks anyway (from the free run), so the model reaches it on its own.
TEST(ServingGrammar, GrammarStartsAfterTheTagTheModelWrites) {
  const Constraint c{ConstraintKind::regex, "[ab]{6}"};
  const std::set<int32_t> free = all_but_ending();
  const auto unconstrained = plain_constrained_greedy(test::engine_prompt(5, 9), 8, [&](int) { return free; });
  const int32_t tag = unconstrained[2];
  const size_t at = std::find(unconstrained.begin(), unconstrained.end(), tag) - unconstrained.begin();
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  Outputs r;
  RequestParams p = request(5, 60, &c);
  p.grammar_after = {tag};
  const uint64_t id = eng.add_request(p, collect(r));
  eng.run_until_idle();
  const auto expected = plain_constrained_greedy(test::engine_prompt(5, 9), (int)at + 8, [&](int i) {
    if (i <= (int)at) return free;
    return i <= (int)at + 6 ? std::set<int32_t>{'a', 'b'} : std::set<int32_t>{eos()};
  });
  EXPECT_EQ(r.tokens[id], expected);
  EXPECT_EQ(std::vector<int32_t>(expected.begin(), expected.begin() + at + 1),
            std::vector<int32_t>(unconstrained.begin(), unconstrained.begin() + at + 1));
  EXPECT_EQ(r.reason[id], FinishReason::stop);
}

TEST(ServingGrammar, Validation) {
  Engine eng(*tiny().model, *tiny().tok, make_kv_cache(f16_opts(), tiny().dims), small_steps());
  const Constraint c{ConstraintKind::regex, "x+"};
  RequestParams p = request(3, 8, &c);
  p.min_tokens = 2;
  EXPECT_THROW(eng.add_request(p, nullptr), Error);
  p.min_tokens = 0;
  p.ignore_eos = true;
  EXPECT_THROW(eng.add_request(p, nullptr), Error);
  GrammarCompiler wider(*tiny().tok, n_vocab() + 8);
  RequestParams q = request(3, 8, nullptr);
  q.grammar = wider.compile(c);
  EXPECT_THROW(eng.add_request(q, nullptr), Error);  // compiled for another vocabulary width
  RequestParams gate = request(3, 8, nullptr);
  gate.grammar_after = {'#'};
  EXPECT_THROW(eng.add_request(gate, nullptr), Error);  // a gate without a grammar
  gate = request(3, 8, &c);
  gate.grammar_after = {n_vocab()};
  EXPECT_THROW(eng.add_request(gate, nullptr), Error);  // a tag outside the vocabulary
}

}  // namespace
}  // namespace mpkv
