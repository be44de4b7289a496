#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>
#include <filesystem>

namespace mpkv::test {

std::string source_path(const std::string& rel) { return std::string(MPKV_SOURCE_DIR) + "/" + rel; }
std::string shared_path(const std::string& rel) { return std::string(MPKV_SOURCE_DIR) + "/../shared/" + rel; }

std::string default_model_path() {
  if (const char* env = std::getenv("MPKV_MODEL"); env && *env) {
    return std::filesystem::exists(env) ? std::string(env) : std::string();
  }
  const std::string p = source_path("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  return std::filesystem::exists(p) ? p : std::string();
}

std::string temp_dir() {
  static const std::string dir = [] {
    std::string d = (std::filesystem::temp_directory_path() / ("mpkv_test_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(MPKV_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace mpkv::test
