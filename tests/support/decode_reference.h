// Decode test scenarios and their CPU reference output, shared by the CPU test of the kernel's
// algorithm (tests/unit/test_cuda_decode_host.cpp) and the device test (tests/cuda): sequences of
// fp16 sink rows, pages written (and shrunk) by the CPU reference kernels, fp16 window rows, one
// query token each; the reference is PagedKvCache's attention path (attend_segments) with the
// scalar kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/page_format.h"
#include "cuda/page_table.h"

namespace mpkv::cuda {

// One sequence: `sink` fp16 rows, `pages` pages (the last holding last_fill rows, a multiple of the
// format's token granularity), `window` fp16 rows; every page shrunk `halvings` times (blocks stop
// at their final bits).
struct SeqCase {
  int sink = 0, pages = 0, last_fill = 0, window = 0, halvings = 0;
};

struct ScenarioSeq {
  std::vector<uint16_t> k16, v16;  // fp16 rows [sink + window][n_head_kv][head_dim]: sink rows, then window rows
  int sink = 0, window = 0;
  std::vector<HostPage> pages;
};

struct DecodeScenario {
  int n_head = 0;
  std::vector<ScenarioSeq> seqs;
  std::vector<float> q;     // [batch][n_head][head_dim], unscaled
  std::vector<float> want;  // the reference output, same shape
};

// A batch covering the table's cases: full pages at their initial bits (sink 1, window 20); a
// partial last page shrunk once (sink 4, no window); no pages yet (7 fp16 rows); pages shrunk
// three times (no sink, window 3).
std::vector<SeqCase> decode_test_batch();

// max_i |got_i - want_i| / (1 + |want_i|) (Error when the sizes differ).
float worst_relative_error(const std::vector<float>& got, const std::vector<float>& want);

DecodeScenario make_decode_scenario(const PageFormat& f, int n_head, const std::vector<SeqCase>& cases, uint32_t seed);

// Page formats covering every device format, for tests: uniform 2/4/8/16 (one plan per width),
// uniform 4 in groups of 32 channels, KIVI 2/4 (keys by channel, groups of 32 tokens), fp16 blocks,
// and a progressive plan (16 -> 2) mixing KIVI keys and fp16 values with uniform components.
struct NamedFormat {
  std::string name;
  PageFormat f;
};
std::vector<NamedFormat> decode_test_formats(int n_head_kv, int head_dim, int page_tokens);

// Puts a scenario's pages and fp16 rows into a store (DevicePageStore or HostStore: both have
// upload_page and upload_rows) and returns its sequences as build_batch_table takes them.
template <class Store>
std::vector<SequenceView> place_scenario(Store& store, const DecodeScenario& sc) {
  std::vector<SequenceView> views;
  for (const ScenarioSeq& s : sc.seqs) {
    SequenceView sv;
    for (const HostPage& p : s.pages) sv.page_slots.push_back(store.upload_page(p));
    sv.last_page_len = s.pages.empty() ? 0 : s.pages.back().filled;
    sv.f16_rows = s.sink + s.window;
    if (sv.f16_rows > 0) {
      sv.f16_k = store.upload_rows(s.k16.data(), sv.f16_rows);
      sv.f16_v = store.upload_rows(s.v16.data(), sv.f16_rows);
    }
    views.push_back(sv);
  }
  return views;
}

// The page one halving down where its blocks can still shrink.
std::vector<uint8_t> halved_bits(const PageFormat& f, const std::vector<uint8_t>& bits);

// Reference attention of one sequence's query q [n_head][head_dim] (unscaled).
std::vector<float> reference_decode(const PageFormat& f, int n_head, const ScenarioSeq& s, const float* q);

}  // namespace mpkv::cuda
