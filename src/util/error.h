// mpkv::Error for bad input; mpkv::InternalError for broken invariants (bugs).
// The rule (docs/design.md §13): MPKV_CHECK / Error when a user, a client or a file can cause the
// failure (a command line, a request, a GGUF or plan file, a budget, an option struct a caller
// fills from them), with a message that says what to change; MPKV_ASSERT / InternalError when only
// a bug in mpkv can: bookkeeping that does not add up, a solver that broke its promise, a caller
// inside mpkv passing a layer, sequence, pointer or position that its own code made up. A message
// that says "internal" is always an InternalError (tests/unit/test_util_error_rule.cpp).
// The CLI prints an Error as "error: ..." and exits 1, an InternalError as "internal error: ..."
// and exits 2 (docs/cli.md); the server answers 400 and 500 (docs/serving.md, "Errors").
#pragma once
#include <exception>
#include <stdexcept>
#include <string>

namespace mpkv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A broken invariant inside mpkv (a bug, not bad input): never caused by what a user passes in.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error("internal error: " + what) {}
};

// How the CLI reports an exception that ended a command (docs/cli.md, "One exit code for errors"):
// an input Error is "error: <what>" and exit code 1; an InternalError, or any other exception
// (a library's, std::bad_alloc), is "internal error: <what>" and exit code 2.
struct ErrorReport {
  int exit_code;
  std::string line;  // without the newline
};
inline ErrorReport report_for(const std::exception& e) {
  if (dynamic_cast<const Error*>(&e)) return {1, std::string("error: ") + e.what()};
  if (dynamic_cast<const InternalError*>(&e)) return {2, e.what()};  // what() starts "internal error: "
  return {2, std::string("internal error: ") + e.what()};
}

// MPKV_ASSERT(cond, msg): throw InternalError(msg) when an invariant does not hold.
#define MPKV_ASSERT(cond, msg)                     \
  do {                                             \
    if (!(cond)) throw ::mpkv::InternalError(msg); \
  } while (0)

// MPKV_CHECK(cond, msg): throw Error(msg) when cond is false. msg may be any string expression.
#define MPKV_CHECK(cond, msg)                     \
  do {                                            \
    if (!(cond)) throw ::mpkv::Error(msg);        \
  } while (0)

}  // namespace mpkv
