// Shared helpers for the test executables.
#pragma once
#include <string>

namespace mpkv::test {

// Path of the default real model (SmolLM2-135M-Instruct Q4_1), from $MPKV_MODEL or
// <source>/models/SmolLM2-135M-Instruct.Q4_1.gguf. Empty when the file is absent, so tests
// that need it can GTEST_SKIP() with a reason (the suite still runs the synthetic-model tests).
std::string default_model_path();
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
