// A constraint that cannot be used: malformed, unsupported, too large or too slow to compile (an
// input error: the client changes its request), or a compiler too busy to take it now (busy:
// retry later). The server answers 400 naming the field that carried it (503 when busy).
#pragma once
#include "util/error.h"

namespace mpkv {

class ConstraintError : public Error {
 public:
  explicit ConstraintError(const std::string& what, bool busy = false) : Error(what), busy_(busy) {}
  bool busy() const { return busy_; }

 private:
  bool busy_;
};

}  // namespace mpkv
