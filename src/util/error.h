// mpkv::Error: the one exception type for bad input and failed preconditions; InternalError for
// broken invariants (bugs).
// Bad input (corrupt file, wrong plan, infeasible budget) throws Error with a message a user
// can act on; the CLI catches it, prints "error: <message>" and exits non-zero.
#pragma once
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
