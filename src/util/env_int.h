// Integer tuning knobs read from the environment (MPKV_POOL_SPIN_US, MPKV_MATVEC_PREFETCH_BYTES).
#pragma once

namespace mpkv {

// The value of environment variable `name`, or `fallback` when it is unset. A set value that is not
// a whole integer in [lo, hi] is bad input: Error naming the variable, its range in `unit`, and
// what was given.
int env_int(const char* name, int fallback, int lo, int hi, const char* unit);

}  // namespace mpkv
