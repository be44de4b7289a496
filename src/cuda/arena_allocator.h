// Offsets into one device arena (docs/cuda.md, "Page store"): pages of every width live in the
// same arena, so a page that shrinks in place just gives its tail back. Host bookkeeping only
// (the arena's memory is the store's); first fit over a free list ordered by offset, neighbours
// coalesced on free. Every allocation starts on kArenaAlign bytes (the kernels read page bytes
// with byte loads, so alignment is for the fp16 rows' 16-bit loads and the copy engines).
#pragma once
#include <cstdint>
#include <map>
#include <optional>

namespace mpkv::cuda {

inline constexpr uint64_t kArenaAlign = 256;

class ArenaAllocator {
 public:
  explicit ArenaAllocator(uint64_t capacity);

  // Offset of a new range of `bytes` (> 0), or nullopt when no free range is large enough.
  std::optional<uint64_t> allocate(uint64_t bytes);
  // Gives back the range at `offset` (Error for an offset that is not allocated).
  void free(uint64_t offset);
  // Keeps the first new_bytes (0 < new_bytes <= current) of the range and frees the rest.
  void shrink(uint64_t offset, uint64_t new_bytes);

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }  // sum of rounded allocation sizes
  uint64_t size_of(uint64_t offset) const;

 private:
  void release(uint64_t offset, uint64_t bytes);
  uint64_t capacity_, used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes
  std::map<uint64_t, uint64_t> live_;  // offset -> rounded bytes
};

}  // namespace mpkv::cuda
