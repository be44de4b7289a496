#include "cuda/device/device_page_store.h"

#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "cuda/device/kernels.h"
#include "cuda/shrink_moves.h"
#include "util/error.h"

namespace mpkv::cuda {

DevicePageStore::DevicePageStore(PageFormat format, uint64_t arena_bytes)
    : f_(std::move(format)), arena_(arena_bytes), layouts_(to_device(f_.device_layout_table())), alloc_(arena_bytes) {}

int DevicePageStore::place(const std::vector<uint8_t>& bits) {
  const uint32_t bytes = f_.page_bytes(bits.data());
  const auto off = alloc_.allocate(bytes);
  MPKV_CHECK(off.has_value(), "CUDA page store: the arena has no room for a page of " + std::to_string(bytes) +
                                  " bytes (" + std::to_string(alloc_.used()) + " of " +
                                  std::to_string(alloc_.capacity()) + " in use)");
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = (int)base_.size();
    base_.push_back(0);
    bits_.emplace_back();
    block_off_.resize(block_off_.size() + f_.n_blocks());
    bits_flat_.resize(bits_flat_.size() + f_.n_blocks());
  }
  base_[slot] = *off;
  bits_[slot] = bits;
  for (int b = 0; b < f_.n_blocks(); ++b) {
    block_off_[(size_t)slot * f_.n_blocks() + b] = f_.block_offset(bits.data(), b);
    bits_flat_[(size_t)slot * f_.n_blocks() + b] = bits[b];
  }
  dirty_ = true;
  return slot;
}

int DevicePageStore::upload_page(const HostPage& p) {
  MPKV_CHECK((int)p.bits.size() == f_.n_blocks() && p.bytes.size() == f_.page_bytes(p.bits.data()),
             "CUDA page store: the host page does not have this format's size");
  const int slot = place(p.bits);
  arena_.upload(p.bytes.data(), p.bytes.size(), base_[slot]);
  return slot;
}

int DevicePageStore::new_page() {
  std::vector<uint8_t> bits;
  for (const ComponentFormat& c : f_.blocks) bits.push_back((uint8_t)c.spec.init_bits);
  return place(bits);
}

int DevicePageStore::clone_page(int slot) {
  const std::vector<uint8_t> bits = slot_bits(slot);
  const int copy = place(bits);
  arena_.copy_within(base_[copy], base_[slot], f_.page_bytes(bits.data()));
  return copy;
}

const std::vector<uint8_t>& DevicePageStore::slot_bits(int slot) const {
  MPKV_CHECK(slot >= 0 && slot < (int)bits_.size() && !bits_[slot].empty(),
             "CUDA page store: slot " + std::to_string(slot) + " holds no page");
  return bits_[slot];
}

HostPage DevicePageStore::download_page(int slot, int filled) const {
  HostPage p;
  p.bits = slot_bits(slot);
  p.filled = filled;
  p.bytes.resize(f_.page_bytes(p.bits.data()));
  arena_.download(p.bytes.data(), p.bytes.size(), base_[slot]);
  return p;
}

void DevicePageStore::free_page(int slot) {
  slot_bits(slot);
  alloc_.free(base_[slot]);
  bits_[slot].clear();
  free_slots_.push_back(slot);
}

uint64_t DevicePageStore::upload_rows(const uint16_t* rows, int n) {
  const uint64_t bytes = (uint64_t)n * f_.n_head_kv * f_.head_dim * 2;
  const auto off = alloc_.allocate(bytes);
  MPKV_CHECK(off.has_value(), "CUDA page store: the arena has no room for " + std::to_string(n) + " fp16 rows");
  arena_.upload(rows, bytes, *off);
  return *off;
}

void DevicePageStore::sync_slots() {
  if (!dirty_) return;
  d_base_ = to_device(base_);
  d_off_ = to_device(block_off_);
  d_bits_ = to_device(bits_flat_);
  dirty_ = false;
}

SlotArrays DevicePageStore::device_slots() const {
  MPKV_ASSERT(!dirty_, "CUDA page store: slot arrays read before sync_slots()");
  return {d_base_.as<uint64_t>(), d_off_.as<uint32_t>(), d_bits_.as<uint8_t>()};
}

void DevicePageStore::append(const std::vector<AppendTask>& tasks, const uint16_t* k16, const uint16_t* v16, int rows) {
  for (const AppendTask& t : tasks) check_append_task(f_, slot_bits(t.slot).data(), t, rows);
  sync_slots();
  const size_t n = (size_t)rows * f_.n_head_kv * f_.head_dim;
  DeviceBuffer dk(2 * n), dv(2 * n);
  dk.upload(k16, 2 * n);
  dv.upload(v16, 2 * n);
  DeviceBuffer dt = to_device(tasks);
  AppendArgs a;
  a.arena = arena();
  a.slots = device_slots();
  a.layouts = device_layouts();
  a.n_blocks = f_.n_blocks();
  a.n_head_kv = f_.n_head_kv;
  a.head_dim = f_.head_dim;
  a.k16 = dk.as<uint16_t>();
  a.v16 = dv.as<uint16_t>();
  a.tasks = dt.as<AppendTask>();
  a.n_tasks = (int)tasks.size();
  launch_append(a);
  device_synchronize("append");
}

DevicePageStore::PreparedShrink DevicePageStore::prepare_shrink(const std::vector<int>& slots,
                                                                 const std::vector<std::vector<uint8_t>>& to_bits) {
  MPKV_CHECK(slots.size() == to_bits.size(), "CUDA shrink: one width list per page");
  // Two thread blocks shrinking one page at once would race, and the second commit would halve it again.
  const std::set<int> distinct(slots.begin(), slots.end());
  MPKV_CHECK(distinct.size() == slots.size(), "CUDA shrink: a page is listed twice");
  PreparedShrink s;
  std::vector<uint64_t> base;
  std::vector<int32_t> indptr{0};
  std::vector<ShrinkMove> moves;
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::vector<uint8_t>& from = slot_bits(slots[i]);
    MPKV_CHECK((int)to_bits[i].size() == f_.n_blocks(), "CUDA shrink: one width per block");
    const std::vector<ShrinkMove> m = page_shrink_moves(f_, from.data(), to_bits[i].data());
    moves.insert(moves.end(), m.begin(), m.end());
    indptr.push_back((int32_t)moves.size());
    base.push_back(base_[slots[i]]);
    s.src_bytes += f_.page_bytes(from.data());
  }
  s.slots = slots;
  s.to_bits = to_bits;
  s.base = to_device(base);
  s.indptr = to_device(indptr);
  s.moves = to_device(moves);
  return s;
}

void DevicePageStore::run_shrink(const PreparedShrink& s) {
  ShrinkArgs a;
  a.arena = arena();
  a.page_base = s.base.as<uint64_t>();
  a.move_indptr = s.indptr.as<int32_t>();
  a.moves = s.moves.as<ShrinkMove>();
  a.n_pages = (int)s.slots.size();
  launch_shrink(a);
}

void DevicePageStore::commit_shrink(PreparedShrink& s) {
  device_synchronize("shrink");
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const int slot = s.slots[i];
    alloc_.shrink(base_[slot], f_.page_bytes(s.to_bits[i].data()));
    bits_[slot] = s.to_bits[i];
    for (int b = 0; b < f_.n_blocks(); ++b) {
      block_off_[(size_t)slot * f_.n_blocks() + b] = f_.block_offset(s.to_bits[i].data(), b);
      bits_flat_[(size_t)slot * f_.n_blocks() + b] = s.to_bits[i][b];
    }
  }
  dirty_ = true;
  s.slots.clear();
}

// ---- decode step -------------------------------------------------------------------------------

DecodeStep::DecodeStep(DevicePageStore& store, const BatchTable& t, int n_head) {
  const PageFormat& f = store.format();
  MPKV_CHECK(n_head > 0 && n_head % f.n_head_kv == 0 && n_head / f.n_head_kv <= kMaxGroup,
             "CUDA decode: n_head must be a multiple of n_head_kv with at most " + std::to_string(kMaxGroup) +
                 " query heads per KV head");
  for (int32_t slot : t.page_indices) store.slot_bits(slot);
  store.sync_slots();
  const int batch = (int)t.last_page_len.size();
  indptr_ = to_device(t.page_indptr);
  indices_ = to_device(t.page_indices);
  last_ = to_device(t.last_page_len);
  f16k_ = to_device(t.f16_k);
  f16v_ = to_device(t.f16_v);
  f16n_ = to_device(t.f16_rows);
  work_ = to_device(t.work);
  work_indptr_ = to_device(t.work_indptr);
  const size_t qn = (size_t)batch * n_head * f.head_dim;
  q_ = DeviceBuffer(qn * sizeof(float));
  out_ = DeviceBuffer(qn * sizeof(float));
  partial_ = DeviceBuffer(t.work.size() * n_head * (2 + (size_t)f.head_dim) * sizeof(float) + 4);
  DecodeArgs& a = args_;
  a.arena = store.arena();
  a.slots = store.device_slots();
  a.layouts = store.device_layouts();
  a.n_blocks = f.n_blocks();
  a.n_head = n_head;
  a.n_head_kv = f.n_head_kv;
  a.head_dim = f.head_dim;
  a.page_tokens = f.page_tokens;
  a.batch = batch;
  a.page_indptr = indptr_.as<int32_t>();
  a.page_indices = indices_.as<int32_t>();
  a.last_page_len = last_.as<int32_t>();
  a.f16_k = f16k_.as<uint64_t>();
  a.f16_v = f16v_.as<uint64_t>();
  a.f16_rows = f16n_.as<int32_t>();
  a.work = work_.as<WorkItem>();
  a.n_work = (int)t.work.size();
  a.work_indptr = work_indptr_.as<int32_t>();
  a.q = q_.as<float>();
  a.scale = 1.0f / std::sqrt((float)f.head_dim);
  a.partial = partial_.as<float>();
  a.out = out_.as<float>();
}

void DecodeStep::set_queries(const std::vector<float>& q) {
  MPKV_CHECK(q.size() * sizeof(float) == q_.bytes(), "CUDA decode: queries are not [batch][n_head][head_dim]");
  q_.upload(q.data(), q_.bytes());
}

void DecodeStep::run() { launch_decode(args_); }

std::vector<float> DecodeStep::output() {
  device_synchronize("decode");
  std::vector<float> out(out_.bytes() / sizeof(float));
  out_.download(out.data(), out_.bytes());
  return out;
}

}  // namespace mpkv::cuda
