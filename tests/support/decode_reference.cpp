#include "support/decode_reference.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "attention/paged_attention.h"
#include "util/error.h"

namespace mpkv::cuda {

std::vector<NamedFormat> decode_test_formats(int n_head_kv, int d, int P) {
  std::vector<NamedFormat> out;
  for (int bits : {2, 4, 8, 16}) {
    const ComponentSpec u{false, GroupAxis::token, d, bits, bits};
    out.push_back({"uniform" + std::to_string(bits), make_page_format(n_head_kv, d, P, {u, u})});
  }
  const ComponentSpec g32{false, GroupAxis::token, 32, 4, 4};
  out.push_back({"uniform4_g32", make_page_format(n_head_kv, d, P, {g32, g32})});
  for (int bits : {2, 4}) {
    const ComponentSpec k{false, GroupAxis::channel, 32, bits, bits}, v{false, GroupAxis::token, d, bits, bits};
    out.push_back({"kivi" + std::to_string(bits), make_page_format(n_head_kv, d, P, {k, v})});
  }
  const ComponentSpec f16{true, GroupAxis::token, 0, 16, 16};
  out.push_back({"f16", make_page_format(n_head_kv, d, P, {f16, f16})});
  const ComponentSpec prog{false, GroupAxis::token, d, 16, 2}, kprog{false, GroupAxis::channel, 32, 16, 2};
  std::vector<ComponentSpec> mixed;
  for (int h = 0; h < n_head_kv; ++h) {
    mixed.push_back(h % 2 ? kprog : prog);
    mixed.push_back(h % 3 == 1 ? f16 : prog);  // head 1: fp16 values beside KIVI keys
  }
  out.push_back({"progressive_mixed", make_page_format(n_head_kv, d, P, mixed)});
  return out;
}

std::vector<SeqCase> decode_test_batch() {
  return {{1, 5, 64, 20, 0}, {4, 3, 32, 0, 1}, {1, 0, 0, 7, 0}, {0, 9, 64, 3, 3}};
}

float worst_relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  MPKV_CHECK(got.size() == want.size(), "worst_relative_error: " + std::to_string(got.size()) + " values against " +
                                            std::to_string(want.size()));
  float worst = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / (1.0f + std::abs(want[i])));
  return worst;
}

std::vector<uint8_t> halved_bits(const PageFormat& f, const std::vector<uint8_t>& bits) {
  std::vector<uint8_t> to = bits;
  for (int b = 0; b < f.n_blocks(); ++b)
    if (!f.blocks[b].spec.f16 && to[b] > f.blocks[b].spec.final_bits) to[b] /= 2;
  return to;
}

DecodeScenario make_decode_scenario(const PageFormat& f, int n_head, const std::vector<SeqCase>& cases, uint32_t seed) {
  const int nkv = f.n_head_kv, d = f.head_dim;
  DecodeScenario sc;
  sc.n_head = n_head;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const SeqCase& c : cases) {
    ScenarioSeq s;
    s.sink = c.sink;
    s.window = c.window;
    const size_t f16_values = (size_t)(c.sink + c.window) * nkv * d;
    s.k16 = random_half_rows(f16_values, seed++);
    s.v16 = random_half_rows(f16_values, seed++);
    for (int p = 0; p < c.pages; ++p) {
      const int n = p + 1 == c.pages ? c.last_fill : f.page_tokens;
      const std::vector<uint16_t> pk = random_half_rows((size_t)n * nkv * d, seed++),
                                  pv = random_half_rows((size_t)n * nkv * d, seed++);
      HostPage hp = write_host_page(f, pk.data(), pv.data(), n);
      for (int h = 0; h < c.halvings; ++h) shrink_host_page(f, hp, halved_bits(f, hp.bits));
      s.pages.push_back(std::move(hp));
    }
    std::vector<float> q((size_t)n_head * d);
    for (float& x : q) x = nd(rng);
    const std::vector<float> ref = reference_decode(f, n_head, s, q.data());
    sc.q.insert(sc.q.end(), q.begin(), q.end());
    sc.want.insert(sc.want.end(), ref.begin(), ref.end());
    sc.seqs.push_back(std::move(s));
  }
  return sc;
}

std::vector<float> reference_decode(const PageFormat& f, int n_head, const ScenarioSeq& s, const float* q) {
  const int d = f.head_dim, nkv = f.n_head_kv, group = n_head / nkv;
  const size_t row = (size_t)nkv * d;
  const PagedAttentionKernels& K = paged_attention_kernels_for(Isa::scalar);
  std::vector<float> out((size_t)n_head * d);
  for (int h = 0; h < nkv; ++h) {
    std::vector<AttnSegment> segs;
    auto add_rows = [&](int pos0, int row0, int n) {
      for (int i = 0; i < n; i += kMaxKernelRows) {
        AttnSegment g;
        g.pos0 = pos0 + i;
        g.n = std::min(kMaxKernelRows, n - i);
        g.k16 = s.k16.data() + (size_t)(row0 + i) * row + (size_t)h * d;
        g.v16 = s.v16.data() + (size_t)(row0 + i) * row + (size_t)h * d;
        g.stride = row;
        segs.push_back(g);
      }
    };
    add_rows(0, 0, s.sink);
    int pos = s.sink;
    for (const HostPage& p : s.pages) {
      append_host_segments(f, p, h, pos, segs);
      pos += p.filled;
    }
    add_rows(pos, s.sink, s.window);
    const int total = pos + s.window;
    std::vector<float> qs((size_t)group * d);
    for (int g = 0; g < group; ++g)
      for (int c = 0; c < d; ++c) qs[(size_t)g * d + c] = q[(size_t)(h * group + g) * d + c] * (1.0f / std::sqrt((float)d));
    std::vector<int> visible(group, total);
    AttnQueries aq;
    aq.q_model = aq.q_code = qs.data();
    aq.ldq = d;
    aq.nq = group;
    aq.visible = visible.data();
    std::vector<float> m(group), l(group), acc((size_t)group * 2 * d), scratch((size_t)group * kMaxKernelRows);
    const SoftmaxPartialView st{m.data(), l.data(), acc.data()};
    softmax_partial_clear(st, group, d);
    attend_segments(K, d, aq, segs.data(), segs.size(), scratch.data(), st);
    // No rotation here: the fp16 (model-space) and packed (code-space) halves just add.
    for (int g = 0; g < group; ++g)
      for (int c = 0; c < d; ++c)
        out[(size_t)(h * group + g) * d + c] = (acc[(size_t)g * 2 * d + c] + acc[(size_t)g * 2 * d + d + c]) / l[g];
  }
  return out;
}

}  // namespace mpkv::cuda
