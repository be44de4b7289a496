#include "util/env_int.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace mpkv {

int env_int(const char* name, int fallback, int lo, int hi, const char* unit) {
  const char* s = std::getenv(name);
  if (!s) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*s != '\0' && *end == '\0' && v >= lo && v <= hi) return (int)v;
  std::string msg(name);
  msg += " must be an integer number of ";
  msg += unit;
  msg += " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '";
  msg += s;
  msg += "'";
  throw Error(msg);
}

}  // namespace mpkv
