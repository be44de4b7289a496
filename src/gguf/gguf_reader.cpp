// GGUF v2/v3 parser. Every read goes through Cursor, which checks the bytes are there first;
// every count is checked against the bytes left before anything is allocated for it, so a
// corrupt or hostile file costs at most a constant factor of its own size in memory.
#include "gguf/gguf_reader.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace mpkv {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr size_t kDefaultAlignment = 32;
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;       // nested arrays deeper than this are surely corrupt
constexpr uint32_t kNumValueTypes = 13;  // UINT8 .. FLOAT64

// Smallest encoded size of one value of each type (string: its u64 length; array: type + count).
size_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 4 + 8;
  }
  return 1;
}

const char* value_type_name(GgufValueType t) {
  static const char* const names[kNumValueTypes] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32",
                                                    "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
                                                    "UINT64", "INT64", "FLOAT64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kNumValueTypes ? names[i] : "?";
}

// Bounds-checked little-endian reader over [data, data + size).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& name) : data_(data), size_(size), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(name_ + ": corrupt GGUF: " + what + " (at byte " + std::to_string(pos_) + " of " +
                std::to_string(size_) + ")");
  }

  void need(size_t n, const char* what) const {
    if (n > remaining()) {
      fail(std::string("file ends while reading ") + what + " (needs " + std::to_string(n) + " bytes, " +
           std::to_string(remaining()) + " left)");
    }
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the file is little-endian, as is x86-64
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > remaining()) {
      fail(std::string(what) + " has length " + std::to_string(len) + " but only " +
           std::to_string(remaining()) + " bytes are left");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

  // Checks that `count` items of at least `min_bytes` each can fit in what is left.
  void check_count(uint64_t count, size_t min_bytes, const std::string& what) const {
    if (min_bytes > 0 && count > remaining() / min_bytes) {
      fail(what + " is " + std::to_string(count) + ", more than the " + std::to_string(remaining()) +
           " bytes left can hold");
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& name_;
};

GgufValueType read_value_type(Cursor& c, const std::string& key) {
  const uint32_t t = c.read<uint32_t>("value type");
  if (t >= kNumValueTypes) c.fail("key '" + key + "' has unknown value type " + std::to_string(t));
  return static_cast<GgufValueType>(t);
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key, int depth);

GgufValue read_array(Cursor& c, const std::string& key, int depth) {
  if (depth >= kMaxArrayDepth) {
    c.fail("key '" + key + "' nests arrays deeper than " + std::to_string(kMaxArrayDepth) + " levels");
  }
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  v.array_type = read_value_type(c, key);
  const uint64_t n = c.read<uint64_t>("array length");
  c.check_count(n, min_value_bytes(v.array_type),
                "array length of key '" + key + "' (" + value_type_name(v.array_type) + ")");
  std::vector<GgufValue> items;
  items.reserve(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) items.push_back(read_value(c, v.array_type, key, depth + 1));
  v.v = std::move(items);
  return v;
}

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::UINT8: v.v = uint64_t{c.read<uint8_t>("uint8 value")}; break;
    case GgufValueType::INT8: v.v = int64_t{c.read<int8_t>("int8 value")}; break;
    case GgufValueType::UINT16: v.v = uint64_t{c.read<uint16_t>("uint16 value")}; break;
    case GgufValueType::INT16: v.v = int64_t{c.read<int16_t>("int16 value")}; break;
    case GgufValueType::UINT32: v.v = uint64_t{c.read<uint32_t>("uint32 value")}; break;
    case GgufValueType::INT32: v.v = int64_t{c.read<int32_t>("int32 value")}; break;
    case GgufValueType::UINT64: v.v = uint64_t{c.read<uint64_t>("uint64 value")}; break;
    case GgufValueType::INT64: v.v = int64_t{c.read<int64_t>("int64 value")}; break;
    case GgufValueType::FLOAT32: v.v = double{c.read<float>("float32 value")}; break;
    case GgufValueType::FLOAT64: v.v = c.read<double>("float64 value"); break;
    case GgufValueType::BOOL: v.v = c.read<uint8_t>("bool value") != 0; break;
    case GgufValueType::STRING: v.v = c.read_string("string value"); break;
    case GgufValueType::ARRAY: return read_array(c, key, depth);
  }
  return v;
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

// ---- GgufValue accessors ----

int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&v)) {
    MPKV_CHECK(*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               "GGUF value " + std::to_string(*u) + " does not fit in int64");
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  throw Error(std::string("GGUF value of type ") + value_type_name(type) + " is not an integer");
}

double GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  throw Error(std::string("GGUF value of type ") + value_type_name(type) + " is not a number");
}

bool GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  throw Error(std::string("GGUF value of type ") + value_type_name(type) + " is not a bool");
}

const std::string& GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw Error(std::string("GGUF value of type ") + value_type_name(type) + " is not a string");
}

const std::vector<GgufValue>& GgufValue::as_array() const {
  if (const auto* a = std::get_if<std::vector<GgufValue>>(&v)) return *a;
  throw Error(std::string("GGUF value of type ") + value_type_name(type) + " is not an array");
}

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the reader checked this cannot overflow
  return n;
}

// ---- GgufReader ----

GgufReader::GgufReader(const std::string& path) : file_(std::make_unique<MmapFile>(path)), name_(path) {
  parse(file_->data(), file_->size());
}

GgufReader::GgufReader(const uint8_t* data, size_t size, std::string name) : name_(std::move(name)) {
  parse(data, size);
}

void GgufReader::parse(const uint8_t* data, size_t size) {
  Cursor c(data, size, name_);
  if (size < 4 + 4 + 8 + 8) {
    c.fail("file is " + std::to_string(size) + " bytes, smaller than a GGUF header (24 bytes)");
  }
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    throw Error(name_ + ": not a GGUF file (magic is not \"GGUF\")");
  }
  version_ = c.read<uint32_t>("version");
  if (version_ == 1) {
    throw Error(name_ + ": GGUF version 1 is not supported (only versions 2 and 3); re-convert the model");
  }
  if (version_ != 2 && version_ != 3) {
    const bool big_endian = (version_ & 0xffffu) == 0 && (version_ >> 16) != 0;
    throw Error(name_ + ": unsupported GGUF version " + std::to_string(version_) +
                (big_endian ? " (a big-endian file?)" : "") + "; mpkv reads versions 2 and 3");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  c.check_count(n_kv, 8 + 4 + 1, "metadata count");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    if (kv_.count(key)) c.fail("duplicate metadata key '" + key + "'");
    const GgufValueType type = read_value_type(c, key);
    GgufValue value = read_value(c, type, key, 0);
    kv_.emplace(std::move(key), std::move(value));
  }

  alignment_ = kDefaultAlignment;
  if (auto it = kv_.find("general.alignment"); it != kv_.end()) {
    const GgufValue& a = it->second;
    const bool is_int = std::holds_alternative<uint64_t>(a.v) || std::holds_alternative<int64_t>(a.v);
    if (!is_int) throw Error(name_ + ": general.alignment is not an integer");
    const int64_t al = a.as_int();
    if (al <= 0 || (al & (al - 1)) != 0 || al > (int64_t{1} << 30)) {
      throw Error(name_ + ": general.alignment is " + std::to_string(al) +
                  ", must be a nonzero power of two (at most 2^30)");
    }
    alignment_ = static_cast<size_t>(al);
  }

  c.check_count(n_tensors, 8 + 4 + 4 + 8, "tensor count");
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.read_string("tensor name");
    if (tensor_index_.count(t.name)) c.fail("duplicate tensor name '" + t.name + "'");
    const uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      c.fail("tensor '" + t.name + "' has " + std::to_string(n_dims) + " dimensions (must be 1.." +
             std::to_string(kMaxDims) + ")");
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        c.fail("tensor '" + t.name + "' has dimension " + std::to_string(d) + " = " + std::to_string(dim) +
               " (must be > 0 and fit in int64)");
      }
      t.dims.push_back(static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(n_elements, static_cast<int64_t>(dim), &n_elements)) {
        c.fail("tensor '" + t.name + "' element count overflows int64 (dims " + dims_string(t.dims) + "...)");
      }
    }
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const GgmlTypeInfo* info = ggml_type_info(type_id);
    if (!info) c.fail("tensor '" + t.name + "' has unknown ggml type id " + std::to_string(type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.dims[0] % info->block_size != 0) {
      c.fail("tensor '" + t.name + "' of type " + info->name + " has row length " + std::to_string(t.dims[0]) +
             ", not a multiple of the block size " + std::to_string(info->block_size));
    }
    size_t n_bytes = 0;
    if (__builtin_mul_overflow(static_cast<size_t>(n_elements / info->block_size), info->type_size, &n_bytes)) {
      c.fail("tensor '" + t.name + "' byte size overflows (dims " + dims_string(t.dims) + ")");
    }
    t.n_bytes = n_bytes;
    t.offset = c.read<uint64_t>("tensor offset");
    if (t.offset % alignment_ != 0) {
      c.fail("tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(alignment_));
    }
    t.data = nullptr;
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const size_t infos_end = c.pos();
  const size_t data_start = (infos_end + alignment_ - 1) / alignment_ * alignment_;  // no overflow: both < 2^31 + size
  if (tensors_.empty()) return;  // a file without tensors may omit the padding
  if (data_start > size) {
    throw Error(name_ + ": corrupt GGUF: data section would start at byte " + std::to_string(data_start) +
                ", past the end of the file (" + std::to_string(size) + " bytes)");
  }
  const size_t data_size = size - data_start;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      throw Error(name_ + ": corrupt GGUF: tensor '" + t.name + "' (" + ggml_type_name((uint32_t)t.type) + " " +
                  dims_string(t.dims) + ", " + std::to_string(t.n_bytes) + " bytes at data offset " +
                  std::to_string(t.offset) + ") extends past the end of the file (data section is " +
                  std::to_string(data_size) + " bytes)");
    }
    t.data = data + data_start + t.offset;
  }
  // Tensors must not overlap (overlap means corrupt offsets).
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.n_bytes > by_offset[i]->offset) {
      throw Error(name_ + ": corrupt GGUF: tensors '" + prev.name + "' and '" + by_offset[i]->name +
                  "' overlap in the data section");
    }
  }
}

const GgufValue& GgufReader::get(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) throw Error(name_ + ": metadata key '" + key + "' is missing");
  return it->second;
}

int64_t GgufReader::get_int(const std::string& key, int64_t def) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return def;
  try {
    return it->second.as_int();
  } catch (const Error& e) {
    throw Error(name_ + ": metadata key '" + key + "': " + e.what());
  }
}

double GgufReader::get_float(const std::string& key, double def) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return def;
  try {
    return it->second.as_float();
  } catch (const Error& e) {
    throw Error(name_ + ": metadata key '" + key + "': " + e.what());
  }
}

std::string GgufReader::get_string(const std::string& key, const std::string& def) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return def;
  try {
    return it->second.as_string();
  } catch (const Error& e) {
    throw Error(name_ + ": metadata key '" + key + "': " + e.what());
  }
}

bool GgufReader::get_bool(const std::string& key, bool def) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return def;
  try {
    return it->second.as_bool();
  } catch (const Error& e) {
    throw Error(name_ + ": metadata key '" + key + "': " + e.what());
  }
}

const GgufTensorInfo* GgufReader::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufReader::tensor(const std::string& name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) throw Error(name_ + ": tensor '" + name + "' not found");
  return *t;
}

}  // namespace mpkv
