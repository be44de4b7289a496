#include "kvcache/prefix_index.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace mpkv {

namespace {
uint64_t mix(uint64_t h, uint64_t x) {  // splitmix64's finalizer over h ^ x
  uint64_t z = h ^ (x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t PrefixIndex::chain(const PrefixBlock* parent, const int32_t* tokens, int n) const {
  uint64_t h = mix(parent ? parent->hash : format_hash_, (uint64_t)n);
  for (int i = 0; i < n; ++i) h = mix(h, (uint32_t)tokens[i]);
  return h;
}

PrefixBlock* PrefixIndex::find(const PrefixBlock* parent, const int32_t* tokens, int n) const {
  auto it = blocks_.find(chain(parent, tokens, n));
  if (it == blocks_.end()) return nullptr;
  PrefixBlock* b = it->second.get();
  if (b->parent != parent || (int)b->tokens.size() != n) return nullptr;
  return std::memcmp(b->tokens.data(), tokens, (size_t)n * sizeof(int32_t)) == 0 ? b : nullptr;
}

PrefixBlock* PrefixIndex::insert(PrefixBlock* parent, const int32_t* tokens, int n, std::vector<uint64_t> page_ids,
                                 size_t record_bytes) {
  const uint64_t h = chain(parent, tokens, n);
  if (blocks_.count(h)) return nullptr;
  auto b = std::make_unique<PrefixBlock>();
  b->id = next_id_++;
  b->hash = h;
  b->parent = parent;
  b->depth = parent ? parent->depth + 1 : 0;
  b->tokens.assign(tokens, tokens + n);
  b->page_ids = std::move(page_ids);
  b->record_bytes = record_bytes;
  b->holders = 1;
  b->last_used = ++tick_;
  if (parent) {
    parent->children++;
    update_evictable(parent);
  }
  PrefixBlock* raw = b.get();
  by_id_[raw->id] = raw;
  blocks_[h] = std::move(b);
  return raw;
}

void PrefixIndex::update_evictable(PrefixBlock* b) {
  // Keyed by last_used, which changes only while a block is held (not evictable then).
  if (b->holders == 0 && b->children == 0)
    evictable_.insert(evict_key(*b));
  else
    evictable_.erase(evict_key(*b));
}

bool PrefixIndex::hold(PrefixBlock* b, bool reader) {
  const bool was_cold = b->holders == 0;
  if (was_cold) evictable_.erase(evict_key(*b));
  b->holders++;
  if (reader) b->readers++;
  b->last_used = ++tick_;
  return was_cold;
}

bool PrefixIndex::release(PrefixBlock* b, bool reader) {
  MPKV_ASSERT(b->holders > 0 && (!reader || b->readers > 0), "prefix index: releasing a block nobody holds");
  b->holders--;
  if (reader) b->readers--;
  update_evictable(b);
  return b->holders == 0;
}

PrefixBlock* PrefixIndex::next_to_evict() const {
  if (evictable_.empty()) return nullptr;
  return by_id_.at(std::get<2>(*evictable_.begin()));
}

void PrefixIndex::erase(PrefixBlock* b) {
  MPKV_ASSERT(b->holders == 0 && b->children == 0, "prefix index: evicting a block that is held or has children");
  evictable_.erase(evict_key(*b));
  if (PrefixBlock* p = b->parent) {
    p->children--;
    update_evictable(p);
  }
  by_id_.erase(b->id);
  evictions_++;
  blocks_.erase(b->hash);
}

double PrefixIndex::cold_cost(const PrefixBlock& b) {
  return (double)b.last_used * 4096.0 - (double)std::min(b.depth, 4095);
}

}  // namespace mpkv
