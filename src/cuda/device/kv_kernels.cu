// Quantize-on-append and in-place shrink kernels (kernels.h), and the device runs of the shared
// fp16 helpers the device tests compare with the host.
#include <cuda_runtime.h>

#include "cuda/device/device_buffer.h"
#include "cuda/append_hd.h"
#include "cuda/device/kernels.h"
#include "cuda/kv_math_hd.h"

namespace mpkv::cuda {

namespace {

__global__ void append_kernel(AppendArgs a) {
  const AppendTask task = a.tasks[blockIdx.x];
  const int b = blockIdx.y;
  const DeviceBlockLayout L = append_layout(a, task, b);
  for (int u = threadIdx.x; u < append_units(L, task.n); u += blockDim.x) append_unit(a, task, b, L, u);
}

// One page per thread block; shrink_moves.h explains why reading a whole chunk, synchronising and
// then writing it is safe in place.
__global__ void shrink_kernel(ShrinkArgs a) {
  uint8_t* page = a.arena + a.page_base[blockIdx.x];
  for (int mi = a.move_indptr[blockIdx.x]; mi < a.move_indptr[blockIdx.x + 1]; ++mi) {
    const ShrinkMove m = a.moves[mi];
    const uint32_t n = move_dst_bytes(m);
    for (uint32_t k0 = 0; k0 < n; k0 += kShrinkChunk) {
      uint8_t v[kShrinkBytesPerThread];
#pragma unroll
      for (int j = 0; j < kShrinkBytesPerThread; ++j) {
        const uint32_t k = k0 + j * kShrinkThreads + threadIdx.x;
        if (k < n) v[j] = move_byte(m, page, k);
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kShrinkBytesPerThread; ++j) {
        const uint32_t k = k0 + j * kShrinkThreads + threadIdx.x;
        if (k < n) page[m.dst + k] = v[j];
      }
      __syncthreads();
    }
  }
}

__global__ void half_to_float_kernel(float* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 65536) out[i] = half_to_float((uint16_t)i);
}

__global__ void float_to_half_kernel(const float* x, int n, uint16_t* rn, uint16_t* down, uint16_t* up) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  rn[i] = float_to_half_rn(x[i]);
  down[i] = float_to_half_down(x[i]);
  up[i] = float_to_half_up(x[i]);
}

__global__ void group_params_kernel(const float* lo, const float* hi, int n, int bits, uint16_t* s, uint16_t* z) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const GroupParams p = group_params(lo[i], hi[i], bits);
  s[i] = p.scale_h;
  z[i] = p.zero_h;
}

int blocks_for(size_t n, int threads) { return (int)((n + threads - 1) / threads); }

}  // namespace

void launch_append(const AppendArgs& a) {
  if (a.n_tasks == 0) return;
  append_kernel<<<dim3(a.n_tasks, a.n_blocks), kAppendThreads>>>(a);
  cuda_check(cudaGetLastError(), "append launch");
}

void launch_shrink(const ShrinkArgs& a) {
  if (a.n_pages == 0) return;
  shrink_kernel<<<a.n_pages, kShrinkThreads>>>(a);
  cuda_check(cudaGetLastError(), "shrink launch");
}

std::vector<float> device_half_to_float_all() {
  DeviceBuffer out(65536 * sizeof(float));
  half_to_float_kernel<<<256, 256>>>(out.as<float>());
  device_synchronize("half_to_float");
  std::vector<float> r(65536);
  out.download(r.data(), r.size() * sizeof(float));
  return r;
}

void device_float_to_half(const std::vector<float>& x, std::vector<uint16_t>& rn, std::vector<uint16_t>& down,
                          std::vector<uint16_t>& up) {
  const size_t n = x.size();
  DeviceBuffer dx = to_device(x), a(2 * n + 2), b(2 * n + 2), c(2 * n + 2);
  float_to_half_kernel<<<blocks_for(n, 256), 256>>>(dx.as<float>(), (int)n, a.as<uint16_t>(), b.as<uint16_t>(),
                                                    c.as<uint16_t>());
  device_synchronize("float_to_half");
  rn.resize(n), down.resize(n), up.resize(n);
  a.download(rn.data(), 2 * n);
  b.download(down.data(), 2 * n);
  c.download(up.data(), 2 * n);
}

void device_group_params(const std::vector<float>& lo, const std::vector<float>& hi, int bits,
                         std::vector<uint16_t>& scale_h, std::vector<uint16_t>& zero_h) {
  const size_t n = lo.size();
  DeviceBuffer dl = to_device(lo), dh = to_device(hi), s(2 * n + 2), z(2 * n + 2);
  group_params_kernel<<<blocks_for(n, 256), 256>>>(dl.as<float>(), dh.as<float>(), (int)n, bits, s.as<uint16_t>(),
                                                   z.as<uint16_t>());
  device_synchronize("group_params");
  scale_h.resize(n), zero_h.resize(n);
  s.download(scale_h.data(), 2 * n);
  z.download(zero_h.data(), 2 * n);
}

}  // namespace mpkv::cuda
