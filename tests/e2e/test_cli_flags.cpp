// End-to-end: the command line a llama.cpp user expects (docs/cli.md, "Conventions" and "llama.cpp
// spellings"). One test per defect the command line once had: every flag checked before anything
// is read or printed, conflicts as errors, clear messages, llama.cpp's spellings, no work dropped
// silently, Ctrl-C with a summary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "fixtures/tiny_model.h"
#include "test_support.h"

namespace mpkv {
namespace {

using test::run_cli;

std::string tiny_model() {
  static const std::string path = [] {
    const std::string p = test::temp_dir() + "/flags_tiny.gguf";
    test::write_tiny_model(p, test::TinyModelSpec{});
    return p;
  }();
  return path;
}

std::string gen() { return "generate -m " + tiny_model() + " -t 1 "; }

bool has(const test::CliResult& r, const std::string& s) { return r.out.find(s) != std::string::npos; }

// The number after `key` in the output ("generated 5 tokens" -> 5), or -1.
long long number_after(const std::string& out, const std::string& key) {
  const size_t i = out.find(key);
  return i == std::string::npos ? -1 : std::atoll(out.c_str() + i + key.size());
}

// ---- checks before output ----

TEST(CliFlags, PromptTooLongIsAnErrorBeforeTheEcho) {
  const auto r = run_cli(gen() + "-p 'mpkv calibrates every layer of the model' -c 8 -n 4");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: ")) << r.out;
  EXPECT_FALSE(has(r, "mpkv calibrates")) << r.out;  // the prompt is not echoed first
}

TEST(CliFlags, TopPOutOfRangeIsAnErrorAndHelpSaysTheRange) {
  auto r = run_cli(gen() + "-p hi --top-p 0");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: --top-p: must be in (0, 1], not 0")) << r.out;
  EXPECT_FALSE(has(r, "hi")) << r.out;
  r = run_cli("generate --help");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("--top-p[^\\n]*\\(0, 1\\]"))) << r.out;
}

TEST(CliFlags, ZeroTokensIsAnError) {
  const auto r = run_cli(gen() + "-p hi -n 0");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: --n-predict: must be -1 or >= 1, not 0")) << r.out;
}

TEST(CliFlags, PplChunksZeroOrNegativeIsAnError) {
  const std::string text = test::temp_dir() + "/flags_text.txt";
  std::ofstream(text) << std::string(2000, 'a');
  for (const char* c : {"0", "-5"}) {
    const auto r = run_cli("ppl -m " + tiny_model() + " -t 1 -f " + text + " -c 64 --chunks " + c);
    EXPECT_EQ(r.exit_code, 1) << c << ": " << r.out;
    EXPECT_TRUE(has(r, "error: --chunks: must be -1 or >= 1")) << r.out;
    EXPECT_FALSE(has(r, "PPL =")) << r.out;
  }
}

// ---- flags that did nothing, silently ----

TEST(CliFlags, KvBitsWithoutAQuantizingMethodIsAnError) {
  auto r = run_cli(gen() + "-p hi -n 1 --kv-bits 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: --kv-bits needs a quantizing --kv-method")) << r.out;
  r = run_cli(gen() + "-p hi -n 1 --kv-method f16 --kv-bits 2");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "no effect with --kv-method f16")) << r.out;
}

TEST(CliFlags, KvMethodOrBitsBesideAPlanIsAnError) {
  const std::string plan = test::source_path("docs/results/plans/combined_2.5.json");
  for (const char* f : {"--kv-method kivi", "--kv-bits 2"}) {
    const auto r = run_cli(gen() + "-p hi -n 1 --kv-plan " + plan + " " + f);
    EXPECT_EQ(r.exit_code, 1) << f << ": " << r.out;
    EXPECT_TRUE(has(r, "conflicts with --kv-plan")) << r.out;
  }
}

TEST(CliFlags, PromptsFileWithPromptOrParallelIsAnError) {
  const std::string file = test::temp_dir() + "/flags_prompts.txt";
  std::ofstream(file) << "one\ntwo\n";
  auto r = run_cli(gen() + "--prompts " + file + " -p hi -n 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "give the prompt one way")) << r.out;
  r = run_cli(gen() + "--prompts " + file + " --parallel 3 -n 1");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "conflicts with --parallel")) << r.out;
}

TEST(CliFlags, SinkAndWindowAreCappedAtTheContext) {
  const auto r = run_cli(gen() + "-p hi -n 2 -c 64 --kv-method uniform --kv-sink 100000 --kv-window 100000 -v");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "window 64, sink 64")) << r.out;
}

TEST(CliFlags, ContextWithinTheFp16WindowWarns) {
  auto r = run_cli(gen() + "-p hi -n 2 -c 64 --kv-method kivi");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "warning: the context (64 tokens) is not longer than the fp16 sink + window (1 + 128)")) << r.out;
  r = run_cli(gen() + "-p hi -n 2 -c 512 --kv-method kivi");
  EXPECT_FALSE(has(r, "warning:")) << r.out;
  const std::string text = test::temp_dir() + "/flags_eval.txt";
  std::ofstream(text) << std::string(3000, 'e');
  r = run_cli("eval -m " + tiny_model() + " -t 1 -f " + text + " --methods kivi --bits 2 --protocols prefill-fake -c 64 --windows 1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "warning: the context (64 tokens)")) << r.out;
}

// ---- messages ----

TEST(CliFlags, ParseErrorsSayErrorAndExitOne) {
  struct Case { std::string args, message; };
  for (const Case& c : std::vector<Case>{
           {gen() + "-p hi -c 0", "error: --ctx: must be in [2, 16777216], not 0"},
           {gen() + "-p hi --temp abc", "error: --temp: 'abc' is not a number"},
           {gen() + "-p hi --no-such-flag", "not expected: --no-such-flag"},
           {"generate -p hi", "error: --model is required"},
           {gen() + "-p hi -t -1", "error: --threads: must be in [0, 4096], not -1"},
           {"bench -m " + tiny_model() + " -t -1", "error: --threads: must be in [0, 4096], not -1"},
           {gen() + "-p hi --seed -2", "error: --seed: must be -1 or an integer in [0, 18446744073709551615], not -2"},
           {gen() + "-p ''", "error: the prompt is empty"},
       }) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.out;
    EXPECT_TRUE(has(r, c.message)) << c.args << ": " << r.out;
    EXPECT_FALSE(has(r, "179769313")) << r.out;  // CLI11's range text of a double
  }
}

TEST(CliFlags, BudgetIsPrintedAsGiven) {
  const auto r = run_cli(gen() + "-p hi -n 1 --kv-method uniform --kv-budget-mib 1e7");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "of 10000000 MiB budget")) << r.out;
}

TEST(CliFlags, FullSixtyFourBitSeedIsUsedAsGiven) {
  const auto r = run_cli(gen() + "-p hi -n 2 --seed 18446744073709551615");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "seed 18446744073709551615")) << r.out;
}

// ---- defaults ----

TEST(CliFlags, SummarySaysHowManyThreadsRan) {
  const auto r = run_cli("generate -m " + tiny_model() + " -p hi -n 2 -t 3");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "| 3 threads |")) << r.out;
}

// Runs `mpkv args`, sends SIGINT after `after`, returns the exit code and output.
test::CliResult run_and_interrupt(const std::string& args, std::chrono::milliseconds after) {
  int fd[2];
  if (pipe(fd) != 0) return {-1, "pipe failed"};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    execl("/bin/sh", "sh", "-c", ("exec " + std::string(MPKV_CLI_PATH) + " " + args).c_str(), (char*)nullptr);
    _exit(127);
  }
  close(fd[1]);
  std::this_thread::sleep_for(after);
  kill(pid, SIGINT);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) out.append(buf, (size_t)n);
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(CliFlags, CtrlCPrintsTheSummary) {
  const auto r = run_and_interrupt(gen() + "-p hi -n -1 -c 1000000 --ignore-eos", std::chrono::milliseconds(2500));
  EXPECT_EQ(r.exit_code, 130) << r.out;
  EXPECT_TRUE(has(r, "stop: abort")) << r.out;
  EXPECT_GT(number_after(r.out, "generated "), 0) << r.out;
}

// ---- missing ----

TEST(CliFlags, InfoOnAnUnsupportedArchitectureListsMetadataAndTensors) {
  const std::string p = test::temp_dir() + "/flags_gpt2.gguf";
  test::TinyModelSpec spec;
  spec.arch = "gpt2";
  test::write_tiny_model(p, spec);
  const auto r = run_cli("info -m " + p);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "general.architecture")) << r.out;
  EXPECT_TRUE(has(r, "'gpt2'")) << r.out;
  EXPECT_TRUE(has(r, "token_embd.weight")) << r.out;
  EXPECT_TRUE(has(r, "error: mpkv cannot run this model")) << r.out;
}

// A model whose architecture mpkv runs but which has a tensor mpkv does not use, or a RoPE scaling
// it does not run: info shows what it could read, then the precise reason (docs/models.md).
TEST(CliFlags, InfoNamesTheTensorOrKeyThatStopsAModel) {
  const std::string p = test::temp_dir() + "/flags_unused_tensor.gguf";
  test::TinyModelSpec spec;
  spec.extra_tensors = {"blk.0.attn_q.bias"};
  test::write_tiny_model(p, spec);
  auto r = run_cli("info -m " + p);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "llama.block_count")) << r.out;  // the metadata it could read
  EXPECT_TRUE(has(r, "error: mpkv cannot run this model: model " + p +
                         " has tensor 'blk.0.attn_q.bias' that mpkv does not use for architecture llama"))
      << r.out;
  const std::string q = test::temp_dir() + "/flags_unknown_scaling.gguf";
  spec.extra_tensors.clear();
  spec.rope_scaling_type = "su";
  test::write_tiny_model(q, spec);
  r = run_cli("info -m " + q);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "llama.rope.scaling.type                  'su'")) << r.out;
  EXPECT_TRUE(has(r, "has unknown llama.rope.scaling.type = 'su'")) << r.out;
  // phi3 with one longrope factor tensor but not the other: the tensors that stop it.
  test::TinyModelSpec phi = test::tiny_variant_spec("phi3_longrope_long");
  phi.rope_factors_short.clear();
  const std::string l = test::temp_dir() + "/flags_phi3_longrope.gguf";
  test::write_tiny_model(l, phi);
  r = run_cli("info -m " + l);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: mpkv cannot run this model: model " + l +
                         " has tensor 'rope_factors_long.weight' but not 'rope_factors_short.weight'"))
      << r.out;
  // A model it runs shows its RoPE factors.
  const std::string f = test::temp_dir() + "/flags_rope_freqs.gguf";
  spec.rope_scaling_type.clear();
  spec.rope_freqs = {1, 1, 2, 2, 4, 4, 8, 8};
  test::write_tiny_model(f, spec);
  r = run_cli("info -m " + f);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "rope factors   rope_freqs.weight, 8 pairs, 1 .. 8")) << r.out;
}

// phi3 longrope (docs/models.md, "Longrope"): info says which factor tensor the context chose and why
// (-c, else context_length 1024), with the chosen tensor's range; generate says it on stderr at
// startup for its -c.
TEST(CliFlags, LongropeChoiceIsShownForTheContext) {
  const std::string p = test::temp_dir() + "/flags_phi3_longrope_choice.gguf";
  test::write_tiny_model(p, test::tiny_variant_spec("phi3_longrope_short"));
  auto r = run_cli("info -m " + p + " -c 256");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "rope longrope  rope_factors_short.weight: context 256 <= original context 256")) << r.out;
  EXPECT_TRUE(has(r, "rope factors   rope_factors_short.weight, 8 pairs, 1 .. 3")) << r.out;
  EXPECT_TRUE(has(r, "rope mscale    cos and sin x 1.11803")) << r.out;
  r = run_cli("info -m " + p + " -c 257");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "rope longrope  rope_factors_long.weight: context 257, 512 as llama.cpp rounds it up > original "
                     "context 256"))
      << r.out;
  EXPECT_TRUE(has(r, "rope factors   rope_factors_long.weight, 8 pairs, 1.5 .. 12")) << r.out;
  r = run_cli("info -m " + p);
  EXPECT_TRUE(has(r, "rope_factors_long.weight: context 1024 (none given: context_length, as llama.cpp's n_ctx 0) > "
                     "original context 256"))
      << r.out;
  r = run_cli("generate -m " + p + " -c 200 -n 2 --temp 0 -p hello");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "[model] longrope factors rope_factors_short.weight: context 200, 256 as llama.cpp rounds it up "
                     "<= original context 256"))
      << r.out;
  r = run_cli("generate -m " + p + " -c 300 -n 2 --temp 0 -p hello");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "[model] longrope factors rope_factors_long.weight: context 300, 512 as llama.cpp rounds it up > "
                     "original context 256"))
      << r.out;
}

// What info says of the variants it runs the way llama.cpp does: YaRN's derived parameters and
// cos / sin scale, and a sliding-window key llama.cpp does not apply (docs/models.md).
TEST(CliFlags, InfoShowsYarnAndAnUnappliedWindow) {
  const std::string y = test::temp_dir() + "/flags_yarn.gguf";
  test::write_tiny_model(y, test::tiny_variant_spec("qwen2_yarn"));
  auto r = run_cli("info -m " + y);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "scaling yarn (scale 4)")) << r.out;
  EXPECT_TRUE(has(r, "rope yarn      original context 100, ext_factor 1, beta_fast 32, beta_slow 1")) << r.out;
  EXPECT_TRUE(has(r, "rope mscale    cos and sin x 1 x (1 + 0.1 ln scale)")) << r.out;
  const std::string w = test::temp_dir() + "/flags_phi3.gguf";
  test::write_tiny_model(w, test::tiny_variant_spec("phi3"));
  r = run_cli("info -m " + w);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "architecture   phi3")) << r.out;
  EXPECT_TRUE(has(r, "sliding window phi3.attention.sliding_window = 5 not applied")) << r.out;
}

TEST(CliFlags, TokenizeShowsPiecesAndReadsAFile) {
  const std::string file = test::temp_dir() + "/flags_tok.txt";
  std::ofstream(file) << "ab";
  auto r = run_cli("tokenize -m " + tiny_model() + " -f " + file);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\d+ -> 'a'\n *\\d+ -> 'b'\n"))) << r.out;
  r = run_cli("tokenize -m " + tiny_model() + " -p ab --ids");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("(\\d+ )*\\d+\n"))) << r.out;
}

TEST(CliFlags, VersionAndUnknownSubcommand) {
  auto r = run_cli("--version");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^mpkv \\d+\\.\\d+\\.\\d+"))) << r.out;
  r = run_cli("gen -m x");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "error: unknown subcommand 'gen' (did you mean 'generate'?)")) << r.out;
}

TEST(CliFlags, SpecialTokensInRawPromptsAreParsedUnlessTurnedOff) {
  auto r = run_cli(gen() + "-p '<|im_start|>' -n 1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const long long parsed = number_after(r.out, "prompt ");
  r = run_cli(gen() + "-p '<|im_start|>' -n 1 --no-parse-special");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const long long plain = number_after(r.out, "prompt ");
  EXPECT_GT(parsed, 0);
  EXPECT_EQ(plain - parsed, (long long)std::string("<|im_start|>").size() - 1) << r.out;  // one token vs one per byte
}

// ---- llama.cpp habits ----

TEST(CliFlags, LlamaCppSpellingsWork) {
  const std::string file = test::temp_dir() + "/flags_prompt.txt";
  std::ofstream(file) << "hello";
  const auto r = run_cli("generate -m " + tiny_model() + " -t 1 -f " + file +
                         " --ctx-size 128 -s 7 --min-p 0.05 --repeat-penalty 1.1 -ctk f16 -ctv f16 -n 3");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "hello")) << r.out;
  EXPECT_TRUE(has(r, "seed 7")) << r.out;
  EXPECT_EQ(number_after(r.out, "generated "), 3) << r.out;
  const auto q = run_cli(gen() + "-p hi -ctk q8_0");
  EXPECT_EQ(q.exit_code, 1) << q.out;
  EXPECT_TRUE(has(q, "no cache type 'q8_0' with llama.cpp's meaning")) << q.out;
  const auto both = run_cli(gen() + "-p hi --kv-method kivi -ctk f16");
  EXPECT_EQ(both.exit_code, 1) << both.out;
  EXPECT_TRUE(has(both, "both set the cache method")) << both.out;
}

TEST(CliFlags, TheLastValueOfARepeatedOptionWins) {
  const auto r = run_cli(gen() + "-p hi -n 3 -n 5 --temp 0 --ignore-eos");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(number_after(r.out, "generated "), 5) << r.out;
}

TEST(CliFlags, BenchTakesGeneratedTokensAndDepthsAndShowsTheSpread) {
  const auto r = run_cli("bench -m " + tiny_model() + " -t 1 -p 16 -n 4 -d 0,32 -r 2");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("decode +4 @ depth +0 +[0-9.]+ \\+/- +[0-9.]+ tok/s"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("decode +4 @ depth +32 "))) << r.out;
}

// --parallel takes a list of batch widths: one decode figure per (depth, width), widths inner.
TEST(CliFlags, BenchSweepsBatchWidthsAtEveryDepth) {
  const auto r = run_cli("bench -m " + tiny_model() + " -t 1 -p 8 -n 2 -d 16,32 -r 1 --synthetic --parallel 1,3");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("depth +16 +[0-9.]+ \\+/- +[0-9.]+ tok/s +\\(KV[^\n]*\n"
                                                  "decode +2 @ depth +16 [^\n]*\\(3 sequences\\)[^\n]*\n"
                                                  "decode +2 @ depth +32 [^(\n]*\\(KV[^\n]*\n"
                                                  "decode +2 @ depth +32 [^\n]*\\(3 sequences\\)")))
      << r.out;
}

// The roofline table and JSON (tools/bench_roofline.h): the work of a decode step counted by hand
// for the tiny llama model (2 layers, d_model 64, 4 heads and 2 KV heads of 16, ffn 96, vocab 300,
// tied output): weight multiply-adds per token 2 x (64x64 + 32x64 + 32x64 + 64x64 + 3 x 96x64)
// + 300x64 = 80640, attention 2 layers x 4 heads x 33 rows x 16 x 2 = 8448 at depth 32 + 1 token;
// KV read per sequence: all 33 positions still fp16 (window 128): 2 layers x 33 x 2 heads x 16 x
// 2 bytes x (K, V) = 8448 bytes.
TEST(CliFlags, BenchRooflineCountsTheBytesAndMultiplyAddsOfAStep) {
  const std::string json = test::temp_dir() + "/flags_bench_roofline.json";
  const auto r = run_cli("bench -m " + tiny_model() + " -t 1 -p 8 -n 1 -d 32 -r 1 --synthetic --parallel 1,3 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("roofline of a decode step \\(read probe [0-9.]+ GB/s with 1 thread; "
                                                  "int8 peak [0-9.]+ GMAC/s"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n +32 +3 +[0-9.]+ [^\n]*16:0\\.02 [^\n]*(read bandwidth|int8 multiply-add peak)\n")))
      << r.out;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["decode"].size(), 2u);
  double weights = -1;
  for (const auto& d : j["decode"]) {
    const int seqs = d["sequences"].get<int>();
    const auto& roof = d["roofline"];
    const double macs = roof["gmac_s"].get<double>() * 1e9 * roof["step_seconds"].get<double>();
    EXPECT_NEAR(macs, seqs * (80640.0 + 8448.0), 1e-6 * macs) << roof.dump();
    EXPECT_EQ(roof["kv_bytes_by_bits"].size(), 1u) << roof.dump();
    EXPECT_EQ(roof["kv_bytes_by_bits"]["16"].get<double>(), seqs * 8448.0) << roof.dump();
    EXPECT_EQ(roof["kv_bytes"].get<double>(), seqs * 8448.0) << roof.dump();
    if (weights < 0) weights = roof["weight_bytes"].get<double>();
    EXPECT_EQ(roof["weight_bytes"].get<double>(), weights) << "one forward call per step reads the weights once";
    EXPECT_GT(roof["read_probe_fraction"].get<double>(), 0.0);
  }
  EXPECT_GT(j["machine"]["read_gb_s"].get<double>(), 0.0);
}

// ---- result files ----

TEST(CliFlags, EvalFindsTheRepositoryPlansFromAnyFolder) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent (the committed plans are SmolLM2's)";
  const std::string text = test::temp_dir() + "/flags_eval_real.txt";
  std::ofstream(text) << "The quick brown fox jumps over the lazy dog. " << std::string(400, 'x');
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(test::temp_dir());  // not the repository
  const auto r = run_cli("eval -m " + m + " -t 1 -f " + text + " --methods ratequant --bits 3 --protocols prefill-fake -c 32 --windows 1");
  std::filesystem::current_path(cwd);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(has(r, "| ratequant-3 |")) << r.out;
}

TEST(CliFlags, PlanFolderHoldsOnlyPlansAndTheirReports) {
  for (const auto& e : std::filesystem::directory_iterator(test::source_path("docs/results/plans")))
    EXPECT_NE(e.path().filename().string().rfind("ppl_", 0), 0u) << e.path() << " is a result, not a plan";
}

// ---- no work dropped (the engine's queue) ----

TEST(CliFlags, PromptThatCanNeverFitTheBudgetIsAnErrorBeforeOutput) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  std::string prompt;
  for (int i = 0; i < 100; ++i) prompt += "The lighthouse keeper climbed the stairs. ";  // ~800 tokens
  const auto r = run_cli("generate -m " + m + " -t 1 -p '" + prompt + "' -c 1024 -n 16 --kv-budget-mib 6");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(has(r, "more than the whole KV budget")) << r.out;
  EXPECT_FALSE(has(r, "lighthouse")) << r.out;
}

TEST(CliFlags, ParallelSequencesWaitForRoomInsteadOfStopping) {
  const std::string m = test::default_model_path();
  if (m.empty()) GTEST_SKIP() << "real model absent";
  std::string prompt;  // ~150 tokens: four sequences past the 128-token fp16 window do not fit 8 MiB at once
  for (int i = 0; i < 15; ++i) prompt += "Write a story about a dragon. ";
  const auto r = run_cli("generate -m " + m + " -t 2 -p '" + prompt + "' --parallel 4 -n 24 --ignore-eos "
                         "--kv-method progressive --kv-bits 2 --kv-budget-mib 8 -c 1024 --temp 0");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (int s = 0; s < 4; ++s)
    EXPECT_TRUE(has(r, "--- sequence " + std::to_string(s) + " (24 tokens, stop: length)")) << r.out;
}

}  // namespace
}  // namespace mpkv
