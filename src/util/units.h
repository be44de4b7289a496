// Small shared helpers for messages and reports: byte counts in MiB, and a monotonic clock in
// seconds (one copy each; every layer may include util/).
#pragma once
#include <chrono>
#include <cstdio>
#include <string>

namespace mpkv {

// "12.34 MiB"
inline std::string mib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// Seconds on the steady clock (differences only).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace mpkv
