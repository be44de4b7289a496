// llama.cpp's own tokenizer test vectors (docs/tokenizer.md, "llama.cpp's vocabulary tests"): for
// each vocabulary-only GGUF ggml-vocab-<name>.gguf with <name>.gguf.inp / .gguf.out, every case's
// text is encoded as llama.cpp's tests/test-tokenizer-0.cpp does (common_tokenize with
// add_special = false, parse_special = false: no BOS, special-token text kept as text) and the ids
// must equal the .out line exactly. The files come from scripts/get_vocab_tests.sh (into
// <source>/.vocab-tests, or $MPKV_VOCAB_TESTS); without them every test is skipped.
//
// kVocabularies lists every vocabulary of that package with test cases, each accepted (all cases
// must match) or refused (loading must throw an Error naming what is unsupported), so a vocabulary
// that starts loading, stops loading or appears in the package fails here until the list is updated.
// Named test_tokenizer_* so it links only mpkv_tokenizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf_reader.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace mpkv {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

enum class Outcome { accepted, refused };

struct Vocabulary {
  const char* name;      // ggml-vocab-<name>.gguf
  Outcome outcome;
  const char* refusal;   // refused: text the load Error must contain
};

void PrintTo(const Vocabulary& v, std::ostream* os) { *os << v.name; }

const Vocabulary kVocabularies[] = {
    {"bert-bge", Outcome::refused, "unsupported tokenizer model 'bert' (tokenizer.ggml.model)"},
    {"command-r", Outcome::accepted, nullptr},
    {"deepseek-coder", Outcome::accepted, nullptr},
    {"deepseek-llm", Outcome::accepted, nullptr},
    {"falcon", Outcome::accepted, nullptr},
    {"gemma-4", Outcome::refused, "unsupported tokenizer model 'gemma4' (tokenizer.ggml.model)"},
    {"gpt-2", Outcome::accepted, nullptr},
    {"llama-bpe", Outcome::accepted, nullptr},
    {"llama-spm", Outcome::accepted, nullptr},
    {"mpt", Outcome::accepted, nullptr},
    {"phi-3", Outcome::accepted, nullptr},
    {"qwen2", Outcome::accepted, nullptr},
    {"qwen35", Outcome::accepted, nullptr},
    {"refact", Outcome::accepted, nullptr},
    {"starcoder", Outcome::accepted, nullptr},
};

constexpr const char* kAbsent =
    "llama.cpp's vocabulary test files absent: scripts/get_vocab_tests.sh fetches them (or set MPKV_VOCAB_TESTS)";

std::string vocab_dir() {
  const char* env = std::getenv("MPKV_VOCAB_TESTS");
  return env && *env ? env : test::source_path(".vocab-tests");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  Ids ids;
};

// test-tokenizer-0.cpp's read_tests: the inputs are separated by "\n__ggml_vocab_test__\n" (a
// separator at the very end opens no further case); output line i (whitespace-stripped) holds case
// i's ids separated by single spaces.
std::vector<Case> read_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string raw = read_file(inp_path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  std::istringstream out(read_file(out_path));
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  if (inputs.size() != lines.size()) {
    throw Error(inp_path + " has " + std::to_string(inputs.size()) + " cases but " + out_path + " has " +
                std::to_string(lines.size()) + " lines");
  }
  std::vector<Case> cases;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Case c{inputs[i], {}};
    std::istringstream ids(lines[i]);
    for (std::string tok; ids >> tok;) {
      size_t used = 0;
      const int v = std::stoi(tok, &used);
      if (used != tok.size()) throw Error(out_path + " line " + std::to_string(i + 1) + ": bad id '" + tok + "'");
      c.ids.push_back(v);
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string gguf_path(const std::string& name) { return vocab_dir() + "/ggml-vocab-" + name + ".gguf"; }

bool files_present() { return fs::exists(vocab_dir() + "/SHA256SUMS"); }

class LlamaCppVocab : public ::testing::TestWithParam<Vocabulary> {
 protected:
  void SetUp() override {
    if (!files_present()) GTEST_SKIP() << kAbsent;
  }
};

TEST_P(LlamaCppVocab, MatchesLlamaCppOrIsRefused) {
  const Vocabulary& v = GetParam();
  const std::string path = gguf_path(v.name);
  ASSERT_TRUE(fs::exists(path) && fs::exists(path + ".inp") && fs::exists(path + ".out"))
      << path << " or its .inp / .out is missing from " << vocab_dir() << " (rerun scripts/get_vocab_tests.sh)";
  const std::vector<Case> cases = read_cases(path + ".inp", path + ".out");
  ASSERT_FALSE(cases.empty()) << path << ".inp holds no cases";
  GgufReader gguf(path);
  if (v.outcome == Outcome::refused) {
    try {
      (void)Tokenizer::from_gguf(gguf);
      ADD_FAILURE() << v.name << " is listed as refused (" << v.refusal
                    << ") but now loads: list it as accepted, so its cases are checked";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(v.refusal), std::string::npos)
          << v.name << ": the load Error should contain \"" << v.refusal << "\"; it is: " << e.what();
      std::printf("llama.cpp vocab %-15s refused (%zu cases not run): %s\n", v.name, cases.size(), e.what());
    }
    return;
  }
  const Tokenizer tok = Tokenizer::from_gguf(gguf);
  size_t passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Ids ids = tok.encode(cases[i].text, /*add_bos=*/false, /*parse_special=*/false);
    if (ids == cases[i].ids) {
      ++passed;
      continue;
    }
    ADD_FAILURE() << v.name << " case " << i << " '" << cases[i].text << "'\n  mpkv:      " << test::ids_text(ids)
                  << "\n  llama.cpp: " << test::ids_text(cases[i].ids);
  }
  std::printf("llama.cpp vocab %-15s %zu/%zu cases match\n", v.name, passed, cases.size());
}

INSTANTIATE_TEST_SUITE_P(All, LlamaCppVocab, ::testing::ValuesIn(kVocabularies),
                         [](const ::testing::TestParamInfo<Vocabulary>& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Every vocabulary in the folder with test cases is in kVocabularies, and nothing listed is gone.
TEST(LlamaCppVocabList, NamesEveryVocabularyWithCases) {
  if (!files_present()) GTEST_SKIP() << kAbsent;
  std::set<std::string> on_disk, listed;
  for (const auto& e : fs::directory_iterator(vocab_dir())) {
    const std::string f = e.path().filename().string();
    const std::string prefix = "ggml-vocab-", suffix = ".gguf.inp";
    if (f.size() > prefix.size() + suffix.size() && f.starts_with(prefix) && f.ends_with(suffix))
      on_disk.insert(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size()));
  }
  for (const Vocabulary& v : kVocabularies) listed.insert(v.name);
  EXPECT_EQ(on_disk, listed) << "the vocabularies with .inp files in " << vocab_dir()
                             << " and kVocabularies differ";
}

}  // namespace
}  // namespace mpkv
