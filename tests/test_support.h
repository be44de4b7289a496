// Shared helpers for the test executables.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpkv::test {

// Path of the default real model (SmolLM2-135M-Instruct Q4_1), from $MPKV_MODEL or
// <source>/models/SmolLM2-135M-Instruct.Q4_1.gguf. Empty when the file is absent, so tests
// that need it can GTEST_SKIP() with a reason (the suite still runs the synthetic-model tests).
std::string default_model_path();
// Path of Gemma 3 270M (Q4_K_M), from $MPKV_GEMMA_MODEL or <source>/models/gemma-3-270m-q4_k_m.gguf
// (`scripts/get_model.sh gemma3-270m` fetches it). Empty when absent: GTEST_SKIP() with
// kGemmaModelAbsent.
std::string gemma_model_path();
inline constexpr const char* kGemmaModelAbsent =
    "Gemma 3 270M absent (scripts/get_model.sh gemma3-270m fetches it, or set MPKV_GEMMA_MODEL)";
// FNV-1a 64 over token ids as little-endian int32 bytes (golden files store id sequences as this
// hash; scripts/tokenizer_golden.py computes the same).
uint64_t fnv1a_ids(const std::vector<int32_t>& ids);
// The ids separated by single spaces (as llama.cpp's tools print them), for failure messages.
std::string ids_text(const std::vector<int32_t>& ids);
// <source dir>/<rel>.
std::string source_path(const std::string& rel);
// <source dir>/../shared/<rel>: the project's shared data (WikiText-2 ...), beside the checkout.
std::string shared_path(const std::string& rel);
// A fresh temporary directory for this test process (created once, not removed on failure).
std::string temp_dir();

// Runs the built `mpkv` binary with `args` (shell words), stdout and stderr captured together.
struct CliResult {
  int exit_code;    // -1 when it did not exit normally
  std::string out;
};
CliResult run_cli(const std::string& args);

}  // namespace mpkv::test
