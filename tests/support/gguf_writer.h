// GGUF writer (version 3), for test fixtures: tiny random models and malformed files.
// Usage: add metadata and tensors (already in their ggml encoding), then write() or to_bytes().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/ggml_types.h"
#include "gguf/gguf_reader.h"

namespace mpkv {

// Builders for metadata values (each checks that `type` is of the matching kind).
GgufValue gguf_uint(GgufValueType type, uint64_t v);   // UINT8/16/32/64
GgufValue gguf_int(GgufValueType type, int64_t v);     // INT8/16/32/64
GgufValue gguf_float(GgufValueType type, double v);    // FLOAT32/64
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> items);  // items must be of elem_type

// The writer takes its alignment from a "general.alignment" value when one is set (else 32).
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);

  // dims in ggml order (dims[0] innermost); bytes must be ggml_row_bytes(type, prod(dims)).
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                  std::vector<uint8_t> bytes);
  // Convenience: an F32 tensor from floats.
  void add_f32_tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values);

  std::vector<uint8_t> to_bytes() const;
  // Writes to <path>.tmp and renames, so a failed write leaves no partial file at path.
  void write(const std::string& path) const;

 private:
  struct Tensor { std::string name; GgmlType type; std::vector<int64_t> dims; std::vector<uint8_t> bytes; };
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
  size_t alignment_ = 32;
};

}  // namespace mpkv
