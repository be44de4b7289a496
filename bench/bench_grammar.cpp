// Structured outputs' CPU costs on a real vocabulary (docs/structured_outputs.md): the compile of a
// typical tool schema (a fresh compile: each repetition changes one description, so the cache
// misses), the same constraint from the cache, and one token mask of that schema (filled at each
// step of a valid answer, the model's own tokens). Medians over the repetitions; one thread calls
// (xgrammar's compile uses its own 2 threads). Prints the CPU's ISA tier and the load.
//
// Usage: bench_grammar MODEL.gguf [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "grammar/grammar_compiler.h"
#include "grammar/token_matcher.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu_features.h"

namespace {
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A get_weather-style tool's parameters: strings, an enum, a bounded integer, an array, nesting.
std::string tool_schema(int variant) {
  return R"({"type": "object", "properties": {
    "location": {"type": "string", "description": "City and country, e.g. Paris, France (v)" + std::to_string(variant) + R"("},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "fields": {"type": "array", "items": {"type": "string", "enum": ["temp", "wind", "rain", "humidity"]}, "maxItems": 4},
    "options": {"type": "object", "properties": {"hourly": {"type": "boolean"}, "lang": {"type": "string", "pattern": "^[a-z]{2}$"}},
                "required": ["hourly"], "additionalProperties": false}},
   "required": ["location", "unit", "days"], "additionalProperties": false})";
}

std::string load_avg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_grammar MODEL.gguf [--reps R]\n");
    return 2;
  }
  int reps = 15;
  for (int i = 2; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  mpkv::GgufReader g(argv[1]);
  const mpkv::Tokenizer tok = mpkv::Tokenizer::from_gguf(g);
  std::printf("cpu: isa %s; load average %s; vocabulary %d tokens\n", mpkv::isa_name(mpkv::active_isa()), load_avg().c_str(),
              tok.n_vocab());
  auto t0 = Clock::now();
  mpkv::GrammarCompiler c(tok, tok.n_vocab());
  c.compile({mpkv::ConstraintKind::regex, "x"});  // the vocabulary's tables, built once per server
  std::printf("compiler setup (vocabulary tables + one trivial compile): %.1f ms\n", ms_since(t0));

  std::vector<double> fresh, cached, mask;
  const mpkv::Constraint typical{mpkv::ConstraintKind::json_schema, tool_schema(0)};
  c.compile(typical);
  const std::string answer = R"({"location": "Paris, France", "unit": "celsius", "days": 3, "fields": ["temp", "rain"], "options": {"hourly": false, "lang": "fr"}})";
  const std::vector<int32_t> ids = tok.encode(answer, false, false);
  for (int r = 1; r <= reps; ++r) {
    t0 = Clock::now();
    c.compile({mpkv::ConstraintKind::json_schema, tool_schema(r)});
    fresh.push_back(ms_since(t0));
    for (int k = 0; k < 100; ++k) {
      t0 = Clock::now();
      c.compile(typical);
      cached.push_back(ms_since(t0));
    }
    mpkv::TokenMatcher m(c.compile(typical));
    for (int32_t id : ids) {
      t0 = Clock::now();
      m.fill_mask();
      mask.push_back(ms_since(t0));
      if (!m.accept(id)) {
        std::fprintf(stderr, "the schema refused token %d of the answer\n", id);
        return 1;
      }
    }
  }
  std::printf("tool schema compile (fresh):  median %8.3f ms over %d  (goal < 20 ms)\n", median(fresh), reps);
  std::printf("tool schema compile (cached): median %8.4f ms over %zu  (goal < 0.1 ms)\n", median(cached), cached.size());
  std::printf("token mask fill:              median %8.4f ms over %zu (%zu tokens of a valid answer x %d)\n", median(mask),
              mask.size(), ids.size(), reps);
  return 0;
}
