// The rule of src/util/error.h (docs/design.md §13): a message that says "internal" reports a bug,
// so it is an InternalError (MPKV_ASSERT), never an input Error (MPKV_CHECK, throw Error(...)),
// which the CLI reports as the user's mistake (exit 1) and the server as the client's (400).
// This test reads every C++ source under src/ and tools/ and lists the input-error sites whose
// string literals contain "internal".
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/error.h"

namespace mpkv {
namespace {

namespace fs = std::filesystem;

// The string literals of the call whose '(' is at text[open], up to its matching ')'; comments
// are skipped. Returns where the call ends.
size_t call_literals(const std::string& text, size_t open, std::string& literals) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '"') {
      size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j)
        if (text[j] == '\\') ++j;
      literals += text.substr(i + 1, j - i - 1) + '\n';
      i = j;
    } else if (ch == '\'') {
      i += text[i + 1] == '\\' ? 3 : 2;
    } else if (ch == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == std::string::npos) return text.size();
    } else if (ch == '(') {
      ++depth;
    } else if (ch == ')' && --depth == 0) {
      return i;
    }
  }
  return text.size();
}

bool says_internal(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  return s.find("internal") != std::string::npos;
}

// "<name>:<line>: <first line of the call>" for each input-error site of `text` whose message
// says "internal". The site kinds: MPKV_CHECK(...) and throw [::][mpkv::]Error(...).
std::vector<std::string> internal_input_errors(const std::string& name, const std::string& text) {
  static const char* const kSites[] = {"MPKV_CHECK(", "throw Error(", "throw ::mpkv::Error(", "throw mpkv::Error("};
  std::vector<std::string> found;
  for (const char* site : kSites) {
    const std::string s = site;
    for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) {
      const size_t bol = text.rfind('\n', at) + 1;  // npos + 1 == 0 on the first line
      const std::string before = text.substr(bol, at - bol);
      if (before.find("//") != std::string::npos || before.find("#define") != std::string::npos) continue;
      if (at > 0 && (std::isalnum((unsigned char)text[at - 1]) || text[at - 1] == '_')) continue;
      std::string literals;
      call_literals(text, at + s.size() - 1, literals);
      if (!says_internal(literals)) continue;
      const long line = std::count(text.begin(), text.begin() + (long)at, '\n') + 1;
      found.push_back(name + ":" + std::to_string(line) + ": " + text.substr(at, text.find('\n', at) - at));
    }
  }
  return found;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST(ErrorRule, TheScannerFindsWhatItLooksFor) {
  EXPECT_EQ(internal_input_errors("a.cpp", "  MPKV_CHECK(x, \"pool: Internal error: bad\");\n").size(), 1u);
  const std::string two_lines = "  MPKV_CHECK(f(a, b),\n             std::string(\"x\") + \"an internal table\");\n";
  EXPECT_EQ(internal_input_errors("a.cpp", two_lines).size(), 1u);
  EXPECT_EQ(internal_input_errors("a.cpp", "if (x) throw Error(\"internal: \" + s);\n").size(), 1u);
  EXPECT_EQ(internal_input_errors("a.cpp", "throw ::mpkv::Error(\"internal\");\n").size(), 1u);
  const std::vector<std::string> where = internal_input_errors("b.cpp", "\n\n  MPKV_CHECK(ok, \"internal\");\n");
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(where[0].rfind("b.cpp:3: MPKV_CHECK(", 0), 0u) << where[0];
  // Not input-error sites, or not saying "internal":
  EXPECT_TRUE(internal_input_errors("a.cpp", "MPKV_ASSERT(x, \"internal bookkeeping\");\n").empty());
  EXPECT_TRUE(internal_input_errors("a.cpp", "MPKV_CHECK(x, \"bad input\");  // not internal\n").empty());
  EXPECT_TRUE(internal_input_errors("a.cpp", "// MPKV_CHECK(x, \"internal\");\n").empty());
  EXPECT_TRUE(internal_input_errors("a.cpp", "throw InternalError(\"internal\");\n").empty());
  EXPECT_TRUE(internal_input_errors("a.cpp", "MPKV_CHECK(c == ')', \"a ')' \\\" here\"); f(\"internal\");\n").empty());
}

TEST(ErrorRule, NoInputErrorSaysInternal) {
  const fs::path root = MPKV_SOURCE_DIR;
  std::vector<std::string> found;
  size_t n_files = 0;
  for (const char* dir : {"src", "tools"}) {
    ASSERT_TRUE(fs::is_directory(root / dir)) << (root / dir);
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;
      ++n_files;
      for (std::string& f : internal_input_errors(fs::relative(e.path(), root).string(), read_all(e.path())))
        found.push_back(std::move(f));
    }
  }
  EXPECT_GT(n_files, 100u);  // the tree was found
  std::string list;
  for (const std::string& f : found) list += "  " + f + "\n";
  EXPECT_TRUE(found.empty()) << found.size()
                             << " input errors (Error, 400 / exit 1) say \"internal\"; make them MPKV_ASSERT "
                                "(InternalError) or reword them (docs/design.md §13):\n"
                             << list;
}

TEST(ErrorRule, InternalErrorIsNotAnInputError) {
  try {
    MPKV_ASSERT(1 + 1 == 3, "arithmetic");
    FAIL() << "MPKV_ASSERT did not throw";
  } catch (const Error&) {
    FAIL() << "an InternalError must not be caught as an input Error";
  } catch (const InternalError& e) {
    EXPECT_STREQ(e.what(), "internal error: arithmetic");
  }
  EXPECT_THROW(MPKV_CHECK(false, "bad input"), Error);
}

TEST(ErrorRule, TheCliReportsInputErrorsWithOneAndBugsWithTwo) {
  const ErrorReport input = report_for(Error("--kv-bits 17 is outside [1, 16]"));
  EXPECT_EQ(input.exit_code, 1);
  EXPECT_EQ(input.line, "error: --kv-bits 17 is outside [1, 16]");
  const ErrorReport bug = report_for(InternalError("KV pool: NaN shrink cost"));
  EXPECT_EQ(bug.exit_code, 2);
  EXPECT_EQ(bug.line, "internal error: KV pool: NaN shrink cost");  // said once
  const ErrorReport other = report_for(std::out_of_range("map::at"));
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_EQ(other.line, "internal error: map::at");
}

}  // namespace
}  // namespace mpkv
