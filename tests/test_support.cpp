#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <cstdlib>
#include <filesystem>

namespace mpkv::test {

std::string source_path(const std::string& rel) { return std::string(MPKV_SOURCE_DIR) + "/" + rel; }
std::string shared_path(const std::string& rel) { return std::string(MPKV_SOURCE_DIR) + "/../shared/" + rel; }

namespace {

// $env when set (empty when that file is absent), else <source>/models/<file> when present.
std::string model_path(const char* env_name, const std::string& file) {
  if (const char* env = std::getenv(env_name); env && *env) {
    return std::filesystem::exists(env) ? std::string(env) : std::string();
  }
  const std::string p = source_path("models/" + file);
  return std::filesystem::exists(p) ? p : std::string();
}

}  // namespace

std::string default_model_path() { return model_path("MPKV_MODEL", "SmolLM2-135M-Instruct.Q4_1.gguf"); }
std::string gemma_model_path() { return model_path("MPKV_GEMMA_MODEL", "gemma-3-270m-q4_k_m.gguf"); }

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s.push_back(' ');
    s.append(std::to_string(id));
  }
  return s;
}

uint64_t fnv1a_ids(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    for (int k = 0; k < 4; ++k) {
      h ^= static_cast<uint8_t>(static_cast<uint32_t>(id) >> (8 * k));
      h *= 0x100000001b3ull;
    }
  }
  return h;
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
