#include "cli_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "util/error.h"

namespace mpkv::cli {

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("cannot write '" + tmp + "': " + std::strerror(errno));
    f << content;
    if (!f.good()) throw Error("failed writing '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace mpkv::cli

namespace mpkv::cli {

namespace {
std::string g_command_line;
}

void set_command_line(int argc, char** argv) {
  g_command_line = "mpkv";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool quote = a.empty() || a.find_first_of(" \t\"'$") != std::string::npos;
    g_command_line += " " + (quote ? "'" + a + "'" : a);
  }
}

const std::string& command_line() { return g_command_line; }

}  // namespace mpkv::cli
