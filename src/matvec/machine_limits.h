// What this machine can do at most, measured in the run that quotes it (benchmarks only): the
// memory read bandwidth and one core's int8 multiply-add peak. Decode roofline figures (`mpkv
// bench`, bench/bench_matvec.cpp; docs/results/speed.md "Roofline") divide by these.
#pragma once
#include <cstddef>
#include <vector>

namespace mpkv {

// Read-sum over a `bytes` buffer split across `threads` OpenMP threads: GB/s (1e9 bytes per
// second), the median of `reps` passes (the buffer is written once first, so its pages exist).
double read_bandwidth_gbs(int threads, size_t bytes = size_t(256) << 20, int reps = 5);

// One core's int8 multiply-add rate of a loop of independent multiply-adds, per instruction this
// CPU can run (vpmaddubsw on 256 bits with AVX2; vpdpbusd on 256 and 512 bits with AVX-512 VNNI),
// in thread CPU time, median of 5; best first. Empty without AVX2 (the scalar tier has no peak).
struct Int8PeakProbe {
  const char* name;
  double macs_per_s;
};
std::vector<Int8PeakProbe> int8_peak_probes();

}  // namespace mpkv
