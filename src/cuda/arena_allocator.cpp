#include "cuda/arena_allocator.h"

#include <iterator>
#include <string>

#include "util/error.h"

namespace mpkv::cuda {

namespace {
uint64_t round_up(uint64_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }
}  // namespace

ArenaAllocator::ArenaAllocator(uint64_t capacity) : capacity_(capacity / kArenaAlign * kArenaAlign) {
  if (capacity_ > 0) free_[0] = capacity_;
}

std::optional<uint64_t> ArenaAllocator::allocate(uint64_t bytes) {
  MPKV_CHECK(bytes > 0, "device arena: allocation of 0 bytes");
  const uint64_t n = round_up(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < n) continue;
    const uint64_t off = it->first, rest = it->second - n;
    free_.erase(it);
    if (rest > 0) free_[off + n] = rest;
    live_[off] = n;
    used_ += n;
    return off;
  }
  return std::nullopt;
}

void ArenaAllocator::release(uint64_t offset, uint64_t bytes) {
  used_ -= bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

void ArenaAllocator::free(uint64_t offset) {
  auto it = live_.find(offset);
  MPKV_CHECK(it != live_.end(), "device arena: free of offset " + std::to_string(offset) + " that is not allocated");
  const uint64_t n = it->second;
  live_.erase(it);
  release(offset, n);
}

void ArenaAllocator::shrink(uint64_t offset, uint64_t new_bytes) {
  auto it = live_.find(offset);
  MPKV_CHECK(it != live_.end(), "device arena: shrink of offset " + std::to_string(offset) + " that is not allocated");
  const uint64_t n = round_up(new_bytes);
  MPKV_CHECK(new_bytes > 0 && n <= it->second, "device arena: shrink must keep 1 .. current bytes");
  if (n == it->second) return;
  const uint64_t tail = it->second - n;
  it->second = n;
  release(offset + n, tail);
}

uint64_t ArenaAllocator::size_of(uint64_t offset) const {
  auto it = live_.find(offset);
  MPKV_CHECK(it != live_.end(), "device arena: offset " + std::to_string(offset) + " is not allocated");
  return it->second;
}

}  // namespace mpkv::cuda
