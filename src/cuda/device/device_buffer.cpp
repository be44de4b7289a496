#include "cuda/device/device_buffer.h"

#include <cuda_runtime.h>

#include <utility>

#include "util/error.h"

namespace mpkv::cuda {

void cuda_check(int status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString((cudaError_t)status));
  }
}

void device_synchronize(const char* what) {
  cuda_check(cudaGetLastError(), what);
  cuda_check(cudaDeviceSynchronize(), what);
}

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  return true;
}

std::string device_description() {
  cudaDeviceProp p{};
  cuda_check(cudaGetDeviceProperties(&p, 0), "device properties");
  return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 30) + " GiB";
}

int device_sm_count() {
  int n = 0;
  cuda_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0), "SM count");
  return n;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes > 0) cuda_check(cudaMalloc(&p_, bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  MPKV_ASSERT(offset + bytes <= n_, "device buffer: upload past the end");
  cuda_check(cudaMemcpy(static_cast<char*>(p_) + offset, host, bytes, cudaMemcpyHostToDevice), "upload");
}
void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  MPKV_ASSERT(offset + bytes <= n_, "device buffer: download past the end");
  cuda_check(cudaMemcpy(host, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost), "download");
}

void DeviceBuffer::copy_within(size_t dst_offset, size_t src_offset, size_t bytes) {
  MPKV_ASSERT(dst_offset + bytes <= n_ && src_offset + bytes <= n_, "device buffer: copy past the end");
  char* p = static_cast<char*>(p_);
  cuda_check(cudaMemcpy(p + dst_offset, p + src_offset, bytes, cudaMemcpyDeviceToDevice), "device copy");
}

EventTimer::EventTimer() {
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "event");
  cuda_check(cudaEventCreate(&b), "event");
  start_ = a;
  stop_ = b;
}
EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void EventTimer::start() { cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(start_)), "event record"); }
double EventTimer::stop_ms() {
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(stop_)), "event record");
  cuda_check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "event wait");
  float ms = 0;
  cuda_check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)), "event time");
  return ms;
}

}  // namespace mpkv::cuda
