// The option blocks several subcommands share (one copy each), the validators that check values
// while the command line is parsed (before anything is read or printed), and the cross-option
// checks every subcommand runs before it loads a model.
//
// Conventions (docs/cli.md): every error is one "error: ..." line on stderr and exit code 1, a
// bad command line as much as a bad file; 2 is left for internal errors (a broken invariant). When
// an option is given twice the last value wins (llama.cpp's habit), except list options, which
// collect every value.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/sampler.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"

namespace mpkv::cli {

// Validators whose message says what is expected ("--top-p: must be in (0, 1], not 1.5").
// number_in / integer_in accept lo <= x <= hi; `expect` is the message and the --help text.
CLI::Validator number_in(double lo, double hi, const std::string& expect);
CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& expect);
// -1 (all / unlimited) or an integer >= 1; 0 and other negatives are errors.
CLI::Validator minus_one_or_positive();
// 0 < x <= 1.
CLI::Validator unit_interval_open_closed();

// -t,--threads. The default is the number of physical cores this process may run on
// (default_threads()); 0 means every logical CPU.
void add_threads_option(CLI::App* sub, int& threads);
// Sets the OpenMP thread count for `requested` (0: logical CPUs) and returns the count used.
int apply_threads(int requested);
// Physical cores among the CPUs this process may run on (hyper-thread siblings counted once).
int default_threads();

// Sampling: --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n, -s,--seed.
struct SamplingArgs {
  SamplerOptions opts;
  std::string seed = "-1";  // "-1": from the clock; else a decimal uint64
};
void add_sampling_options(CLI::App* sub, SamplingArgs& a);
// The seed to use: the parsed --seed, or one from the clock for "-1".
uint64_t resolve_seed(const std::string& seed);

// --no-prefix-cache and --prefix-cache-floor-bits (engine.h EngineOptions; docs/serving.md "Prefix cache").
void add_prefix_cache_options(CLI::App* sub, bool& enabled, int& floor_bits);

// The --kv-* options (kv_cache_factory.h) and llama.cpp's -ctk / -ctv (f16 only: see docs/cli.md).
void add_kv_cache_options(CLI::App* sub, KvCacheOptions& o);
// Conflicts among the --kv-* options as given on the command line: bits without a quantizing
// --kv-method, method/bits/group beside --kv-plan. Throws Error.
void check_kv_flags(const CLI::App* sub, const KvCacheOptions& o);
// Sink and window beyond the context hold nothing more than the context: cap them at n_ctx.
void cap_kv_sizes(KvCacheOptions& o, int n_ctx);
// A warning on stderr when a quantizing plan keeps every position of an n_ctx context at fp16.
void warn_if_nothing_quantized(const KvPlan& plan, int n_ctx);

// Model::load for a run of n_ctx tokens per sequence (the context that chooses phi3's longrope
// factors), saying on stderr which factors that context chose and why (docs/models.md, "Longrope").
std::unique_ptr<Model> load_model(const std::string& path, int n_ctx);

// "1e+07" -> "10000000", "6" -> "6", "0.5" -> "0.5": MiB and other figures without clipping.
std::string format_number(double x);

// An option's value counts as given when it appeared on the command line.
bool given(const CLI::App* sub, const std::string& name);

}  // namespace mpkv::cli
