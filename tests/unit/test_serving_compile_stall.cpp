// A slow grammar compile does not stall other requests (docs/structured_outputs.md, "Compilation"):
// the API handler over the real engine (the tiny synthetic model, stepped by EngineLoop) and the
// real GrammarCompiler, whose test hook (GrammarCompilerOptions::test_before_compile) holds one
// constraint's compile until the test releases it. While it is held, an unconstrained request and
// one whose constraint is already cached run to their end; the held request is still waiting; once
// released it completes under its grammar. No sleeps decide anything: every wait is on an event,
// bounded by a deadline far above what the work needs.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/engine.h"
#include "fixtures/engine_tiny.h"
#include "kvcache/kv_cache_factory.h"
#include "server/api_handler.h"
#include "server/engine_backend.h"
#include "server/engine_loop.h"
#include "test_grammar_support.h"

using namespace mpkv;
using namespace mpkv::server;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {
constexpr auto kBound = 120s;  // against hanging only: the tiny model's work takes well under a second

json completion(int seed, int max_tokens, const char* regex) {
  json b = {{"prompt", test::engine_prompt(seed, 9)}, {"max_tokens", max_tokens}, {"temperature", 0}};
  if (regex) b["guided_regex"] = regex;
  return b;
}

TEST(ServingCompileStall, ASlowCompileDoesNotStallOtherRequests) {
  const test::EngineTiny& f = test::engine_tiny();
  KvCacheOptions kv;
  kv.page_tokens = 8;
  EngineOptions eo;
  eo.n_ctx = 256;
  eo.max_seqs = 8;
  Engine engine(*f.model, *f.tok, make_kv_cache(kv, f.dims), eo);
  const std::string slow_regex = "[ab]{6}", cached_regex = "[xy]{5}";
  test::Latch held, release;
  GrammarCompilerOptions g;
  g.compile_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kBound);
  g.test_before_compile = [&](const Constraint& c) {
    if (c.text != slow_regex) return;
    held.set();
    release.wait(kBound);
  };
  EngineBackend backend(engine, g);
  ApiHandler handler{HandlerOptions{}};
  handler.set_backend(&backend);
  EngineLoop loop(engine);
  auto post = [&](const json& body) { return handler.handle({"POST", "/v1/completions", "", body.dump(), nullptr}); };
  std::future<HttpResponse> slow;
  struct Release {  // the held compile is let go whatever happens below (before `slow` is waited for)
    test::Latch& l;
    ~Release() { l.set(); }
  } guard{release};

  ASSERT_EQ(post(completion(1, 20, cached_regex.c_str())).status, 200);  // compiled now: cached later
  slow = std::async(std::launch::async, [&] { return post(completion(2, 20, slow_regex.c_str())); });
  ASSERT_TRUE(held.wait(kBound)) << "the slow request's compile never started";

  // Its compile is held: other requests are served to their end meanwhile.
  const HttpResponse free = post(completion(3, 16, nullptr));
  ASSERT_EQ(free.status, 200) << free.body;
  const json fj = json::parse(free.body);
  EXPECT_EQ(fj["usage"]["completion_tokens"], 16);
  EXPECT_EQ(fj["choices"][0]["finish_reason"], "length");
  const HttpResponse cached = post(completion(4, 20, cached_regex.c_str()));
  ASSERT_EQ(cached.status, 200) << cached.body;
  EXPECT_TRUE(std::regex_match(json::parse(cached.body)["choices"][0]["text"].get<std::string>(), std::regex(cached_regex)));
  EXPECT_EQ(slow.wait_for(0s), std::future_status::timeout) << "the held request answered before its compile was released";

  release.set();
  ASSERT_EQ(slow.wait_for(kBound), std::future_status::ready);
  const HttpResponse s = slow.get();
  ASSERT_EQ(s.status, 200) << s.body;
  const json sj = json::parse(s.body);
  EXPECT_EQ(sj["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(std::regex_match(sj["choices"][0]["text"].get<std::string>(), std::regex(slow_regex))) << s.body;
  loop.stop();
}

}  // namespace
