#include "cuda/decode_host.h"

#include <cmath>
#include <string>

#include "cuda/append_hd.h"
#include "cuda/decode_rows_hd.h"
#include "util/error.h"

namespace mpkv::cuda {

namespace {
constexpr int kMaxD = 32 * kMaxChannelsPerLane;
using Row = float[kMaxD];

// One "warp"'s online-softmax state for the group's queries (empty: m = -inf, l = 0, acc = 0).
struct WarpState {
  float m[kMaxGroup], l[kMaxGroup], acc[kMaxGroup][kMaxD] = {};
  WarpState() {
    for (int g = 0; g < kMaxGroup; ++g) m[g] = -INFINITY, l[g] = 0.0f;
  }
};

void align_arena(std::vector<uint8_t>& arena) { arena.resize((arena.size() + 255) / 256 * 256); }
}  // namespace

HostStore::HostStore(const PageFormat& format) : f(format), layouts(format.device_layout_table()) {}

int HostStore::upload_page(const HostPage& p) {
  align_arena(arena);
  const int slot = (int)base.size();
  base.push_back(arena.size());
  arena.insert(arena.end(), p.bytes.begin(), p.bytes.end());
  for (int b = 0; b < f.n_blocks(); ++b) {
    block_off.push_back(f.block_offset(p.bits.data(), b));
    bits.push_back(p.bits[b]);
  }
  return slot;
}

int HostStore::new_page() {
  HostPage p;
  for (const ComponentFormat& c : f.blocks) p.bits.push_back((uint8_t)c.spec.init_bits);
  p.bytes.assign(f.page_bytes(p.bits.data()), 0);
  return upload_page(p);
}

HostPage HostStore::page(int slot, int filled) const {
  HostPage p;
  p.filled = filled;
  p.bits.assign(bits.begin() + (size_t)slot * f.n_blocks(), bits.begin() + (size_t)(slot + 1) * f.n_blocks());
  const uint8_t* start = arena.data() + base[slot];
  p.bytes.assign(start, start + f.page_bytes(p.bits.data()));
  return p;
}

void append_on_host(HostStore& s, const std::vector<AppendTask>& tasks, const uint16_t* k16, const uint16_t* v16,
                    int rows) {
  const int nb = s.f.n_blocks();
  for (const AppendTask& t : tasks) {
    MPKV_CHECK(t.slot >= 0 && t.slot < (int)s.base.size(), "append_on_host: slot " + std::to_string(t.slot) + " holds no page");
    check_append_task(s.f, s.bits.data() + (size_t)t.slot * nb, t, rows);
  }
  AppendArgs a;
  a.arena = s.arena.data();
  a.slots = {s.base.data(), s.block_off.data(), s.bits.data()};
  a.layouts = s.layouts.data();
  a.n_blocks = s.f.n_blocks();
  a.n_head_kv = s.f.n_head_kv;
  a.head_dim = s.f.head_dim;
  a.k16 = k16;
  a.v16 = v16;
  for (const AppendTask& task : tasks)
    for (int b = 0; b < a.n_blocks; ++b) {
      const DeviceBlockLayout L = append_layout(a, task, b);
      for (int u = 0; u < append_units(L, task.n); ++u) append_unit(a, task, b, L, u);
    }
}

uint64_t HostStore::upload_rows(const uint16_t* rows, int n) {
  align_arena(arena);
  const uint64_t off = arena.size();
  const uint8_t* b = reinterpret_cast<const uint8_t*>(rows);
  arena.insert(arena.end(), b, b + (size_t)n * f.n_head_kv * f.head_dim * 2);
  return off;
}

std::vector<float> decode_on_host(const HostStore& s, const BatchTable& t, int n_head, const std::vector<float>& q) {
  const PageFormat& f = s.f;
  const int d = f.head_dim, nkv = f.n_head_kv, G = n_head / nkv, batch = (int)t.last_page_len.size();
  MPKV_CHECK(n_head % nkv == 0 && G <= kMaxGroup && d <= kMaxD, "decode_on_host: unsupported shape");
  DecodeArgs a;
  a.arena = s.arena.data();
  a.slots = {s.base.data(), s.block_off.data(), s.bits.data()};
  a.layouts = s.layouts.data();
  a.n_blocks = f.n_blocks();
  a.n_head = n_head;
  a.n_head_kv = nkv;
  a.head_dim = d;
  a.page_tokens = f.page_tokens;
  a.batch = batch;
  a.page_indptr = t.page_indptr.data();
  a.page_indices = t.page_indices.data();
  a.last_page_len = t.last_page_len.data();
  a.f16_k = t.f16_k.data();
  a.f16_v = t.f16_v.data();
  a.f16_rows = t.f16_rows.data();
  a.scale = 1.0f / std::sqrt((float)d);
  const DeviceBlockLayout f16 = f16_row_layout(d);
  // Split: one partial (m, l, acc[d]) per (work item, query head), as the split kernel writes it.
  std::vector<float> partial(t.work.size() * n_head * (2 + (size_t)d));
  for (size_t wi = 0; wi < t.work.size(); ++wi) {
    const WorkItem& w = t.work[wi];
    for (int h = 0; h < nkv; ++h) {
      std::vector<WarpState> warps(kDecodeWarps);
      int nf = 0;
      const int rows = item_rows(a, w, &nf);
      for (int i = 0; i < rows; ++i) {
        WarpState& ws = warps[i % kDecodeWarps];
        const RowRef r = row_ref(a, w, h, nf, i, f16);
        Row x = {};
        dequant_run(r.lk, r.k, r.t, 0, d, x);
        float sc[kMaxGroup];
        for (int g = 0; g < G; ++g) {
          const float* qg = q.data() + ((size_t)w.seq * n_head + h * G + g) * d;
          float dot = 0.0f;
          for (int c = 0; c < d; ++c) dot += qg[c] * a.scale * x[c];
          sc[g] = dot;
        }
        dequant_run(r.lv, r.v, r.t, 0, d, x);
        for (int g = 0; g < G; ++g)
          softmax_row_update(sc[g], x, ws.m[g], ws.l[g], ws.acc[g]);
      }
      for (int g = 0; g < G; ++g)
        for (int c = 0; c < d; ++c) {
          float mm = -INFINITY, ll = 0.0f, aa = 0.0f;
          for (const WarpState& ws : warps) {
            const MergeWeights mw = merge_weights(mm, ws.m[g]);
            ll = ll * mw.wa + ws.l[g] * mw.wb;
            aa = aa * mw.wa + ws.acc[g][c] * mw.wb;
            mm = mw.m;
          }
          float* pg = partial.data() + ((wi * n_head) + (size_t)h * G + g) * (2 + d);
          pg[2 + c] = aa;
          if (c == 0) pg[0] = mm, pg[1] = ll;
        }
    }
  }
  // Merge: a sequence's items in order.
  std::vector<float> out((size_t)batch * n_head * d);
  for (int b = 0; b < batch; ++b)
    for (int hq = 0; hq < n_head; ++hq)
      for (int c = 0; c < d; ++c) {
        float m = -INFINITY, l = 0.0f, acc = 0.0f;
        for (int i = t.work_indptr[b]; i < t.work_indptr[b + 1]; ++i) {
          const float* p = partial.data() + ((size_t)i * n_head + hq) * (2 + d);
          const MergeWeights mw = merge_weights(m, p[0]);
          l = l * mw.wa + p[1] * mw.wb;
          acc = acc * mw.wa + p[2 + c] * mw.wb;
          m = mw.m;
        }
        out[((size_t)b * n_head + hq) * d + c] = acc / l;
      }
  return out;
}

}  // namespace mpkv::cuda
