// GGUF reader (versions 2 and 3) over a memory-mapped file.
//
// File layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv key/value pairs
// (gguf string key, u32 value type, value), then n_tensors tensor infos (name, u32 n_dims,
// u64 dims[n_dims], u32 ggml type, u64 offset), then padding to general.alignment (default 32),
// then the tensor data; each tensor's offset is relative to the data start and aligned.
// Every count, length and offset is checked against the file size before use: a corrupt file
// throws Error with what is wrong and where, never reads out of bounds.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gguf/ggml_types.h"
#include "util/mmap_file.h"

namespace mpkv {

enum class GgufValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

// A metadata value. Arrays hold their element type and elements (which may themselves be arrays).
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> v;
  GgufValueType array_type = GgufValueType::UINT8;  // element type when type == ARRAY

  bool is_array() const { return type == GgufValueType::ARRAY; }
  // Typed accessors; each throws Error when the value is not of a compatible kind.
  int64_t as_int() const;      // any integer type (or bool)
  double as_float() const;     // float or integer types
  bool as_bool() const;
  const std::string& as_string() const;
  const std::vector<GgufValue>& as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the innermost (contiguous) dimension
  GgmlType type;
  uint64_t offset;            // from the start of the data section
  const uint8_t* data;        // points into the mapped file
  size_t n_bytes;
  int64_t n_elements() const;
};

class GgufReader {
 public:
  // Maps and parses the file. Throws Error on any inconsistency.
  explicit GgufReader(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests); the buffer must outlive the reader.
  GgufReader(const uint8_t* data, size_t size, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  const std::string& path() const { return name_; }

  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  // Throws Error naming the key when absent.
  const GgufValue& get(const std::string& key) const;
  // Convenience getters with a default when the key is absent (wrong type still throws).
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  std::string get_string(const std::string& key, const std::string& def) const;
  bool get_bool(const std::string& key, bool def) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // Throws Error naming the tensor when absent.
  const GgufTensorInfo& tensor(const std::string& name) const;

 private:
  void parse(const uint8_t* data, size_t size);
  std::unique_ptr<MmapFile> file_;
  std::string name_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace mpkv
