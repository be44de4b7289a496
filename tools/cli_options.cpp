#include "cli_options.h"

#include <sched.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <utility>

#include "model/forward.h"
#include "util/error.h"

namespace mpkv::cli {

namespace {

// Parses the whole of s as a finite double; false on anything else ("abc", "1x", "nan", "").
bool parse_double(const std::string& s, double& x) {
  if (s.empty()) return false;
  char* end = nullptr;
  x = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(x);
}

bool parse_int64(const std::string& s, int64_t& x) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  return ec == std::errc() && p == s.data() + s.size();
}

CLI::Validator make_validator(std::function<std::string(std::string&)> check, const std::string& expect) {
  return CLI::Validator(std::move(check), expect);
}

}  // namespace

// lo <= x <= hi for a value `parse` accepts; `kind` names what it expects ("a number").
template <class T, class Parse>
CLI::Validator bounded(T lo, T hi, const std::string& expect, const char* kind, Parse parse) {
  return make_validator(
      [=](std::string& s) -> std::string {
        T x;
        if (!parse(s, x)) return "'" + s + "' is not " + kind + " (expected " + expect + ")";
        if (x < lo || x > hi) return "must be " + expect + ", not " + s;
        return {};
      },
      expect);
}

CLI::Validator number_in(double lo, double hi, const std::string& expect) {
  return bounded(lo, hi, expect, "a number", parse_double);
}

CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& expect) {
  return bounded(lo, hi, expect, "an integer", parse_int64);
}

CLI::Validator minus_one_or_positive() {
  return make_validator(
      [](std::string& s) -> std::string {
        int64_t x;
        if (!parse_int64(s, x)) return "'" + s + "' is not an integer (expected -1 or >= 1)";
        if (x != -1 && x < 1) return "must be -1 or >= 1, not " + s;
        return {};
      },
      "-1 or >= 1");
}

CLI::Validator unit_interval_open_closed() {
  return make_validator(
      [](std::string& s) -> std::string {
        double x;
        if (!parse_double(s, x)) return "'" + s + "' is not a number (expected in (0, 1])";
        if (!(x > 0.0 && x <= 1.0)) return "must be in (0, 1], not " + s;
        return {};
      },
      "in (0, 1]");
}

// ---- threads ----

int default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::max(1, default_num_threads());
  std::set<std::pair<std::string, std::string>> cores;  // (package, core) of each allowed CPU
  int logical = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++logical;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string pkg, core;
    std::ifstream(dir + "physical_package_id") >> pkg;
    std::ifstream(dir + "core_id") >> core;
    if (core.empty()) return logical > 0 ? CPU_COUNT(&set) : 1;  // no topology: count logical CPUs
    cores.insert({pkg, core});
  }
  return std::max<int>(1, (int)cores.size());
}

int apply_threads(int requested) {
  int n = requested;
  if (n <= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : default_num_threads();
  }
  set_num_threads(n);
  return n;
}

void add_threads_option(CLI::App* sub, int& threads) {
  threads = default_threads();
  sub->add_option("-t,--threads", threads, "threads (default: physical cores; 0: every logical CPU)")
      ->capture_default_str()
      ->check(integer_in(0, 4096, "in [0, 4096]"));
}

// ---- sampling ----

void add_sampling_options(CLI::App* sub, SamplingArgs& a) {
  SamplerOptions& o = a.opts;
  sub->add_option("--temp", o.temperature, "temperature (0: greedy)")->capture_default_str()->check(number_in(0, 1e6, ">= 0"));
  sub->add_option("--top-k", o.top_k, "sample among the k most likely tokens (0: all)")
      ->capture_default_str()->check(integer_in(0, 1 << 30, ">= 0"));
  sub->add_option("--top-p", o.top_p, "keep the most likely tokens until their probability reaches p (1: off)")
      ->capture_default_str()->check(unit_interval_open_closed());
  sub->add_option("--min-p", o.min_p, "drop tokens less likely than min-p x the most likely (0: off)")
      ->capture_default_str()->check(number_in(0, 1, "in [0, 1]"));
  sub->add_option("--repeat-penalty", o.repeat_penalty, "penalize recent tokens: positive logits / p, negative x p (1: off)")
      ->capture_default_str()->check(number_in(1e-3, 1e3, "in [0.001, 1000]"));
  sub->add_option("--repeat-last-n", o.repeat_last_n, "recent tokens the penalty looks at")
      ->capture_default_str()->check(integer_in(0, 1 << 20, "in [0, 1048576]"));
  sub->add_option("-s,--seed", a.seed, "sampling seed, 0 to 2^64-1 (-1: from the clock; the seed used is printed)")
      ->capture_default_str()
      ->check(make_validator(
          [](std::string& s) -> std::string {
            uint64_t x;
            const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
            if (s == "-1" || (ec == std::errc() && p == s.data() + s.size())) return {};
            return "must be -1 or an integer in [0, 18446744073709551615], not " + s;
          },
          "-1 or in [0, 2^64-1]"));
}

uint64_t resolve_seed(const std::string& seed) {
  if (seed == "-1") return (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  uint64_t x = 0;
  std::from_chars(seed.data(), seed.data() + seed.size(), x);  // checked by the option's validator
  return x;
}

// ---- KV cache ----

namespace {
// llama.cpp's cache types mpkv stores the same way: only f16 (see docs/cli.md for why q8_0 / q4_0
// and friends are not aliases of mpkv's methods).
CLI::Validator llama_cache_type() {
  return make_validator(
      [](std::string& s) -> std::string {
        if (s == "f16") return {};
        return "mpkv has no cache type '" + s + "' with llama.cpp's meaning; use --kv-method (" + kv_method_list() +
               ") and --kv-bits";
      },
      "f16");
}

CLI::Validator kv_method_name_check() {
  return make_validator(
      [](std::string& s) -> std::string { return is_kv_method(s) ? "" : "'" + s + "' is not one of " + kv_method_list(); },
      "a KV method");
}
}  // namespace

void add_prefix_cache_options(CLI::App* sub, bool& enabled, int& floor_bits) {
  sub->add_flag("!--no-prefix-cache", enabled,
                "recompute every prompt (default: reuse cached KV pages of earlier requests' prefixes; needs a KV budget)");
  sub->add_option("--prefix-cache-floor-bits", floor_bits,
                  "bits cold cached pages shrink to before they are evicted (0: the plan's final bits; 16: never shrink, LRU eviction)")
      ->capture_default_str()
      ->check(CLI::IsMember({0, 2, 4, 8, 16}));
}

void add_kv_cache_options(CLI::App* sub, KvCacheOptions& o) {
  const auto set_method = [&o](const std::string& s) { o.method = parse_kv_method(s); };
  sub->add_option_function<std::string>("--kv-method", set_method, "KV cache: " + kv_method_list())
      ->default_str(kv_method_name(o.method))
      ->check(kv_method_name_check());
  sub->add_option_function<std::string>("--cache-type-k,--cache-type-v", set_method,
                                         "-ctk / -ctv: llama.cpp's cache types; only f16 has the same meaning here")
      ->check(llama_cache_type());
  sub->add_option("--kv-bits", o.bits, "final bits of keys and values (progressive: the lowest they shrink to)")
      ->capture_default_str()->check(integer_in(1, 16, "in [1, 16]"));
  sub->add_option("--kv-k-bits", o.k_bits, "bits of keys (default: --kv-bits)")->check(integer_in(1, 16, "in [1, 16]"));
  sub->add_option("--kv-v-bits", o.v_bits, "bits of values (default: --kv-bits)")->check(integer_in(1, 16, "in [1, 16]"));
  sub->add_option("--kv-group", o.group, "quantization group (0: method default; KIVI keys: tokens)")
      ->check(integer_in(0, 1 << 20, ">= 0"));
  sub->add_option("--kv-window", o.window, "recent tokens kept at fp16 (-1: method default, 128; capped at the context)")
      ->check(integer_in(-1, 1 << 30, "-1 or >= 0"));
  sub->add_option("--kv-sink", o.sink, "first tokens kept at fp16 (-1: method default, 1; capped at the context)")
      ->check(integer_in(-1, 1 << 30, "-1 or >= 0"));
  sub->add_option("--kv-budget-mib", o.budget_mib, "KV memory budget shared by all sequences, MiB (0: none)")
      ->check(number_in(0, 1 << 24, "in [0, 16777216]"));
  sub->add_option("--kv-plan", o.plan_file, "KV plan file (JSON) instead of --kv-method/--kv-bits/--kv-group");
  sub->add_option("--kv-page", o.page_tokens, "tokens per page (0: 64)")->check(integer_in(0, 65536, "in [0, 65536]"));
}

bool given(const CLI::App* sub, const std::string& name) { return sub->count(name) > 0; }

void check_kv_flags(const CLI::App* sub, const KvCacheOptions& o) {
  MPKV_CHECK(!(given(sub, "--kv-method") && given(sub, "--cache-type-k")),
             "-ctk / -ctv and --kv-method both set the cache method; give one");
  const bool method = given(sub, "--kv-method") || given(sub, "--cache-type-k");
  if (given(sub, "--kv-plan")) {
    for (const char* f : {"--kv-method", "--cache-type-k", "--kv-bits", "--kv-k-bits", "--kv-v-bits", "--kv-group"})
      MPKV_CHECK(!given(sub, f), std::string(f) + " conflicts with --kv-plan, which sets the method, bits and groups");
    return;
  }
  for (const char* f : {"--kv-bits", "--kv-k-bits", "--kv-v-bits", "--kv-group"}) {
    if (!given(sub, f)) continue;
    MPKV_CHECK(method, std::string(f) + " needs a quantizing --kv-method (uniform, kivi, rotated, turbo, progressive); "
                                        "the default cache is f16");
    MPKV_CHECK(o.method != KvMethod::f16, std::string(f) + " has no effect with --kv-method f16");
  }
}

std::unique_ptr<Model> load_model(const std::string& path, int n_ctx) {
  auto model = Model::load(path, n_ctx);
  const std::string choice = model->config().longrope_choice();
  if (!choice.empty()) std::fprintf(stderr, "[model] longrope factors %s\n", choice.c_str());
  return model;
}

void cap_kv_sizes(KvCacheOptions& o, int n_ctx) {
  o.window = o.window > n_ctx ? n_ctx : o.window;
  o.sink = o.sink > n_ctx ? n_ctx : o.sink;
}

void warn_if_nothing_quantized(const KvPlan& plan, int n_ctx) {
  if (plan.method == KvPlanMethod::f16 || n_ctx > plan.sink + plan.min_fp16_window()) return;
  std::fprintf(stderr,
               "warning: the context (%d tokens) is not longer than the fp16 sink + window (%d + %d): no position will "
               "be quantized; raise -c or lower --kv-window\n",
               n_ctx, plan.sink, plan.min_fp16_window());
}

std::string format_number(double x) {
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", x);
  return b;
}

}  // namespace mpkv::cli
