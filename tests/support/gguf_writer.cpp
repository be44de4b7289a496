// GGUF v3 writer: header, key/values in insertion order, tensor infos, then the data section
// with every tensor padded to the alignment (the layout GgufReader and llama.cpp expect).
#include "support/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "util/error.h"

namespace mpkv {

namespace {

bool is_uint_type(GgufValueType t) {
  return t == GgufValueType::UINT8 || t == GgufValueType::UINT16 || t == GgufValueType::UINT32 ||
         t == GgufValueType::UINT64;
}
bool is_int_type(GgufValueType t) {
  return t == GgufValueType::INT8 || t == GgufValueType::INT16 || t == GgufValueType::INT32 ||
         t == GgufValueType::INT64;
}

class ByteSink {
 public:
  std::vector<uint8_t> bytes;
  template <typename T>
  void put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));  // little-endian host
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void pad_to(size_t alignment) { bytes.resize((bytes.size() + alignment - 1) / alignment * alignment, 0); }
};

void put_value(ByteSink& out, const GgufValue& v, const std::string& key) {
  auto u = [&]() { return std::get<uint64_t>(v.v); };
  auto i = [&]() { return std::get<int64_t>(v.v); };
  try {
    switch (v.type) {
      case GgufValueType::UINT8: out.put<uint8_t>((uint8_t)u()); return;
      case GgufValueType::INT8: out.put<int8_t>((int8_t)i()); return;
      case GgufValueType::UINT16: out.put<uint16_t>((uint16_t)u()); return;
      case GgufValueType::INT16: out.put<int16_t>((int16_t)i()); return;
      case GgufValueType::UINT32: out.put<uint32_t>((uint32_t)u()); return;
      case GgufValueType::INT32: out.put<int32_t>((int32_t)i()); return;
      case GgufValueType::UINT64: out.put<uint64_t>(u()); return;
      case GgufValueType::INT64: out.put<int64_t>(i()); return;
      case GgufValueType::FLOAT32: out.put<float>((float)std::get<double>(v.v)); return;
      case GgufValueType::FLOAT64: out.put<double>(std::get<double>(v.v)); return;
      case GgufValueType::BOOL: out.put<uint8_t>(std::get<bool>(v.v) ? 1 : 0); return;
      case GgufValueType::STRING: out.put_string(std::get<std::string>(v.v)); return;
      case GgufValueType::ARRAY: {
        const auto& items = std::get<std::vector<GgufValue>>(v.v);
        out.put<uint32_t>(static_cast<uint32_t>(v.array_type));
        out.put<uint64_t>(items.size());
        for (const GgufValue& item : items) {
          MPKV_CHECK(item.type == v.array_type, "GgufWriter: key '" + key + "': array element type differs from the array's");
          put_value(out, item, key);
        }
        return;
      }
    }
  } catch (const std::bad_variant_access&) {
    // fall through
  }
  throw Error("GgufWriter: key '" + key + "': value does not hold what its type " +
              std::to_string(static_cast<uint32_t>(v.type)) + " says");
}

}  // namespace

GgufValue gguf_uint(GgufValueType type, uint64_t v) {
  MPKV_CHECK(is_uint_type(type), "gguf_uint: not an unsigned integer type");
  GgufValue r;
  r.type = type;
  r.v = v;
  return r;
}

GgufValue gguf_int(GgufValueType type, int64_t v) {
  MPKV_CHECK(is_int_type(type), "gguf_int: not a signed integer type");
  GgufValue r;
  r.type = type;
  r.v = v;
  return r;
}

GgufValue gguf_float(GgufValueType type, double v) {
  MPKV_CHECK(type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64, "gguf_float: not a float type");
  GgufValue r;
  r.type = type;
  r.v = v;
  return r;
}

GgufValue gguf_bool(bool v) {
  GgufValue r;
  r.type = GgufValueType::BOOL;
  r.v = v;
  return r;
}

GgufValue gguf_string(std::string v) {
  GgufValue r;
  r.type = GgufValueType::STRING;
  r.v = std::move(v);
  return r;
}

GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> items) {
  for (const GgufValue& item : items) MPKV_CHECK(item.type == elem_type, "gguf_array: element of another type");
  GgufValue r;
  r.type = GgufValueType::ARRAY;
  r.array_type = elem_type;
  r.v = std::move(items);
  return r;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, gguf_uint(GgufValueType::UINT32, v)); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set(key, gguf_int(GgufValueType::INT32, v)); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, gguf_float(GgufValueType::FLOAT32, v)); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, gguf_bool(v)); }
void GgufWriter::set_string(const std::string& key, const std::string& v) { set(key, gguf_string(v)); }

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const std::string& s : v) items.push_back(gguf_string(s));
  set(key, gguf_array(GgufValueType::STRING, std::move(items)));
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(gguf_int(GgufValueType::INT32, x));
  set(key, gguf_array(GgufValueType::INT32, std::move(items)));
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(gguf_float(GgufValueType::FLOAT32, x));
  set(key, gguf_array(GgufValueType::FLOAT32, std::move(items)));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& dims,
                            std::vector<uint8_t> bytes) {
  MPKV_CHECK(!dims.empty() && dims.size() <= 4, "GgufWriter: tensor '" + name + "' needs 1..4 dims");
  for (const Tensor& t : tensors_) MPKV_CHECK(t.name != name, "GgufWriter: duplicate tensor '" + name + "'");
  int64_t n = 1;
  for (int64_t d : dims) {
    MPKV_CHECK(d > 0 && !__builtin_mul_overflow(n, d, &n), "GgufWriter: tensor '" + name + "' has a bad dim");
  }
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(type));
  MPKV_CHECK(info != nullptr, "GgufWriter: tensor '" + name + "': " + ggml_type_name(static_cast<uint32_t>(type)));
  MPKV_CHECK(dims[0] % info->block_size == 0,
             "GgufWriter: tensor '" + name + "' row length is not a multiple of the block size");
  const size_t expect = ggml_row_bytes(type, n);
  MPKV_CHECK(bytes.size() == expect, "GgufWriter: tensor '" + name + "' has " + std::to_string(bytes.size()) +
                                         " bytes, expected " + std::to_string(expect));
  tensors_.push_back({name, type, dims, std::move(bytes)});
}

void GgufWriter::add_f32_tensor(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  add_tensor(name, GgmlType::F32, dims, std::move(bytes));
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  size_t alignment = alignment_;
  for (const auto& kv : kv_) {
    if (kv.first == "general.alignment") {
      const int64_t a = kv.second.as_int();
      MPKV_CHECK(a > 0 && (a & (a - 1)) == 0, "GgufWriter: general.alignment must be a power of two");
      alignment = static_cast<size_t>(a);
    }
  }
  ByteSink out;
  out.put<uint32_t>(0x46554747);  // "GGUF"
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kv_.size());
  for (const auto& [key, value] : kv_) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value(out, value, key);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offset += (t.bytes.size() + alignment - 1) / alignment * alignment;
  }
  out.pad_to(alignment);
  for (const Tensor& t : tensors_) {
    out.bytes.insert(out.bytes.end(), t.bytes.begin(), t.bytes.end());
    out.pad_to(alignment);
  }
  return std::move(out.bytes);
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  MPKV_CHECK(f != nullptr, "GgufWriter: cannot create '" + tmp + "'");
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    throw Error("GgufWriter: failed writing '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error("GgufWriter: cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

}  // namespace mpkv
