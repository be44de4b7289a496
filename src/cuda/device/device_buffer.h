// Device memory and the CUDA runtime's errors, for the host side of the CUDA code (plain C++:
// includes cuda_runtime.h, compiled by g++ and nvcc alike).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpkv::cuda {

// Whether a CUDA device can be used; *why says what is missing when not (no driver, no device).
bool device_available(std::string* why = nullptr);
// "NVIDIA H200, sm_90, 132 SMs, 141 GiB" style description of device 0.
std::string device_description();
// Number of SMs of device 0 (for the work split).
int device_sm_count();

// Throws Error("CUDA: <what>: <runtime's message>") when `status` (a cudaError_t) is not success.
void cuda_check(int status, const char* what);
// Waits for the device and reports any asynchronous kernel error.
void device_synchronize(const char* what);

// One device allocation (cudaMalloc); moves, no copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  // Device-to-device copy inside the buffer (ranges must not overlap).
  void copy_within(size_t dst_offset, size_t src_offset, size_t bytes);

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A buffer holding a copy of a host vector (an empty vector gets a 1-byte buffer, so pointers are valid).
template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.empty() ? 1 : v.size() * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// Elapsed device time between two points of the default stream (cudaEvent pair).
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  // Records the stop event, waits for it and returns milliseconds since start().
  double stop_ms();

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace mpkv::cuda
