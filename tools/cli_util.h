// Small helpers shared by the subcommands.
#pragma once
#include <exception>
#include <string>

namespace mpkv::cli {

// Thrown after a run stopped by Ctrl-C has printed its summary; main exits with 130 (128 + SIGINT).
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

// The whole file as bytes; throws Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path);
// Writes `content` to `path` atomically (temp file + rename), so a failure leaves no partial file.
void write_file_atomic(const std::string& path, const std::string& content);
// The command line as typed ("mpkv eval -m ..."), for reports that record their command.
void set_command_line(int argc, char** argv);
const std::string& command_line();

}  // namespace mpkv::cli
