// Decode attention over mixed-width pages plus fp16 sink and window rows, flash-decoding style
// (kernels.h has the launch shapes; docs/cuda.md the design): a split kernel writes one online-
// softmax partial per (work item, query head), a merge kernel combines a sequence's items.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/device/device_buffer.h"
#include "cuda/device/kernels.h"
#include "cuda/decode_rows_hd.h"
#include "cuda/kv_math_hd.h"
#include "util/error.h"

namespace mpkv::cuda {

namespace {

constexpr int kThreads = kDecodeWarps * 32;
constexpr int kMaxDecodeHeadDim = 32 * kMaxChannelsPerLane;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// MG, MC: compile-time bounds of the GQA group and of the channels per lane (head_dim / 32), so the
// queries, accumulators and row values stay in registers; launch_decode picks the smallest
// instantiation that fits.
template <int MG, int MC>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(DecodeArgs a) {
  const WorkItem w = a.work[blockIdx.x];
  const int h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int d = a.head_dim, G = a.n_head / a.n_head_kv, cpl = d / 32, c0 = lane * cpl;
  const DeviceBlockLayout f16 = f16_row_layout(d);

  float q[MG][MC], acc[MG][MC], m[MG], l[MG];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int k = 0; k < MC; ++k) {
      acc[g][k] = 0.0f;
      q[g][k] = (g < G && k < cpl) ? a.q[((size_t)w.seq * a.n_head + h * G + g) * d + c0 + k] * a.scale : 0.0f;
    }
  }
  int nf = 0;
  const int rows = item_rows(a, w, &nf);
  for (int i = warp; i < rows; i += kDecodeWarps) {
    const RowRef r = row_ref(a, w, h, nf, i, f16);
    float x[MC], s[MG];
#pragma unroll
    for (int k = 0; k < MC; ++k) x[k] = 0.0f;
    dequant_run(r.lk, r.k, r.t, c0, cpl, x);
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      float part = 0.0f;
#pragma unroll
      for (int k = 0; k < MC; ++k) part += q[g][k] * x[k];
      s[g] = g < G ? warp_sum(part) : 0.0f;
    }
    dequant_run(r.lv, r.v, r.t, c0, cpl, x);
#pragma unroll
    for (int g = 0; g < MG; ++g) {
      if (g >= G) break;
      softmax_row_update(s[g], x, m[g], l[g], acc[g]);
    }
  }

  // The four warps' states meet in shared memory; thread e then merges channel e % d of head e / d.
  __shared__ float sm_m[kDecodeWarps][MG], sm_l[kDecodeWarps][MG];
  __shared__ float sm_acc[kDecodeWarps][MG][32 * MC];
#pragma unroll
  for (int g = 0; g < MG; ++g) {
    if (g >= G) break;
    if (lane == 0) sm_m[warp][g] = m[g], sm_l[warp][g] = l[g];
#pragma unroll
    for (int k = 0; k < MC; ++k)
      if (k < cpl) sm_acc[warp][g][c0 + k] = acc[g][k];
  }
  __syncthreads();
  float* part = a.partial + ((size_t)blockIdx.x * a.n_head + (size_t)h * G) * (2 + d);
  for (int e = threadIdx.x; e < G * d; e += kThreads) {
    const int g = e / d, c = e % d;
    float mm = -INFINITY, ll = 0.0f, aa = 0.0f;
    for (int wi = 0; wi < kDecodeWarps; ++wi) {
      const MergeWeights mw = merge_weights(mm, sm_m[wi][g]);
      ll = ll * mw.wa + sm_l[wi][g] * mw.wb;
      aa = aa * mw.wa + sm_acc[wi][g][c] * mw.wb;
      mm = mw.m;
    }
    float* pg = part + (size_t)g * (2 + d);
    pg[2 + c] = aa;
    if (c == 0) pg[0] = mm, pg[1] = ll;
  }
}

__global__ void decode_merge_kernel(DecodeArgs a) {
  const int b = blockIdx.x, hq = blockIdx.y, d = a.head_dim;
  const int i0 = a.work_indptr[b], i1 = a.work_indptr[b + 1];
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float m = -INFINITY, l = 0.0f, acc = 0.0f;
    for (int i = i0; i < i1; ++i) {
      const float* p = a.partial + ((size_t)i * a.n_head + hq) * (2 + d);
      const MergeWeights mw = merge_weights(m, p[0]);
      l = l * mw.wa + p[1] * mw.wb;
      acc = acc * mw.wa + p[2 + c] * mw.wb;
      m = mw.m;
    }
    a.out[((size_t)b * a.n_head + hq) * d + c] = acc / l;
  }
}

}  // namespace

void launch_decode(const DecodeArgs& a) {
  MPKV_ASSERT(a.head_dim % 32 == 0 && a.head_dim <= kMaxDecodeHeadDim, "decode: head_dim must be a multiple of 32 up to 256");
  MPKV_ASSERT(a.n_head % a.n_head_kv == 0 && a.n_head / a.n_head_kv <= kMaxGroup, "decode: GQA group above 8");
  if (a.n_work == 0) return;
  const dim3 grid(a.n_work, a.n_head_kv);
  const bool small = a.n_head / a.n_head_kv <= 4 && a.head_dim <= 128;  // Llama / Qwen / SmolLM2 shapes
  if (small) decode_split_kernel<4, 4><<<grid, kThreads>>>(a);
  else decode_split_kernel<kMaxGroup, kMaxChannelsPerLane><<<grid, kThreads>>>(a);
  cuda_check(cudaGetLastError(), "decode split launch");
  decode_merge_kernel<<<dim3(a.batch, a.n_head), 128>>>(a);
  cuda_check(cudaGetLastError(), "decode merge launch");
}

}  // namespace mpkv::cuda
