// GgufWriter -> GgufReader round trip: metadata of every value type (nested arrays included) and
// tensors of several ggml types come back identical, with aligned offsets, from memory and from disk.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "gguf/gguf_reader.h"
#include "support/gguf_writer.h"
#include "test_support.h"
#include "util/error.h"
#include "util/fp16.h"

namespace mpkv {
namespace {

using VT = GgufValueType;

// Deep equality of metadata values (type, element type, payload).
void expect_same(const GgufValue& a, const GgufValue& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  if (a.is_array()) {
    ASSERT_EQ(a.array_type, b.array_type) << where;
    const auto& x = a.as_array();
    const auto& y = b.as_array();
    ASSERT_EQ(x.size(), y.size()) << where;
    for (size_t i = 0; i < x.size(); ++i) expect_same(x[i], y[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  ASSERT_EQ(a.v.index(), b.v.index()) << where;
  if (auto* u = std::get_if<uint64_t>(&a.v)) {
    EXPECT_EQ(*u, std::get<uint64_t>(b.v)) << where;
  }
  if (auto* i = std::get_if<int64_t>(&a.v)) {
    EXPECT_EQ(*i, std::get<int64_t>(b.v)) << where;
  }
  if (auto* d = std::get_if<double>(&a.v)) {
    EXPECT_EQ(*d, std::get<double>(b.v)) << where;
  }
  if (auto* t = std::get_if<bool>(&a.v)) {
    EXPECT_EQ(*t, std::get<bool>(b.v)) << where;
  }
  if (auto* s = std::get_if<std::string>(&a.v)) {
    EXPECT_EQ(*s, std::get<std::string>(b.v)) << where;
  }
}

std::vector<uint8_t> bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

struct Fixture {
  GgufWriter w;
  std::vector<std::pair<std::string, GgufValue>> kv;  // what we put in
  std::vector<uint8_t> f16_bytes, q4_0_bytes, q6_k_bytes, bf16_bytes;
  std::vector<float> f32_values;
};

Fixture make_fixture() {
  Fixture f;
  auto put = [&](const std::string& k, GgufValue v) {
    f.kv.emplace_back(k, v);
    f.w.set(k, std::move(v));
  };
  // Every scalar type, at values that exercise the full width.
  put("t.u8", gguf_uint(VT::UINT8, 255));
  put("t.i8", gguf_int(VT::INT8, -128));
  put("t.u16", gguf_uint(VT::UINT16, 65535));
  put("t.i16", gguf_int(VT::INT16, -32768));
  put("t.u32", gguf_uint(VT::UINT32, 4294967295u));
  put("t.i32", gguf_int(VT::INT32, std::numeric_limits<int32_t>::min()));
  put("t.u64", gguf_uint(VT::UINT64, std::numeric_limits<uint64_t>::max()));
  put("t.i64", gguf_int(VT::INT64, std::numeric_limits<int64_t>::min()));
  put("t.f32", gguf_float(VT::FLOAT32, 0.1f));  // stored as float: 0.1f round-trips exactly
  put("t.f64", gguf_float(VT::FLOAT64, 0.1));
  put("t.bool_true", gguf_bool(true));
  put("t.bool_false", gguf_bool(false));
  put("t.string", gguf_string("h\xc3\xa9llo \n world"));
  put("t.empty_string", gguf_string(""));
  put("t.empty_array", gguf_array(VT::UINT8, {}));
  put("t.u16_array", gguf_array(VT::UINT16, {gguf_uint(VT::UINT16, 1), gguf_uint(VT::UINT16, 65535)}));
  put("t.bool_array", gguf_array(VT::BOOL, {gguf_bool(true), gguf_bool(false), gguf_bool(true)}));
  put("t.f64_array", gguf_array(VT::FLOAT64, {gguf_float(VT::FLOAT64, -1e300), gguf_float(VT::FLOAT64, 2.5)}));
  // Nested: array of arrays of arrays, inner arrays of different element types.
  put("t.nested", gguf_array(VT::ARRAY, {gguf_array(VT::INT8, {gguf_int(VT::INT8, -1), gguf_int(VT::INT8, 7)}),
                                         gguf_array(VT::STRING, {gguf_string("x"), gguf_string("")}),
                                         gguf_array(VT::ARRAY, {gguf_array(VT::UINT64, {gguf_uint(VT::UINT64, 9)})}),
                                         gguf_array(VT::FLOAT32, {})}));
  f.w.set_u32("s.u32", 7);
  f.w.set_i32("s.i32", -7);
  f.w.set_f32("s.f32", 1.5f);
  f.w.set_bool("s.bool", true);
  f.w.set_string("s.string", "llama");
  f.w.set_string_array("s.strings", {"a", "bc", ""});
  f.w.set_i32_array("s.i32s", {1, -2, 3});
  f.w.set_f32_array("s.f32s", {0.5f, -0.25f});
  f.w.set_string("s.string", "llama2");  // set() on an existing key replaces it

  // Tensors: F32 [5, 3], F16 [7], BF16 [3, 2, 2], Q4_0 [64, 2] (4 blocks), Q6_K [256] (1 block).
  for (int i = 0; i < 15; ++i) f.f32_values.push_back(0.25f * i - 1.0f);
  f.w.add_f32_tensor("w.f32", {5, 3}, f.f32_values);
  for (int i = 0; i < 7; ++i) {
    const uint16_t h = fp32_to_fp16(0.5f * i);
    f.f16_bytes.push_back(h & 0xff);
    f.f16_bytes.push_back(h >> 8);
  }
  f.w.add_tensor("w.f16", GgmlType::F16, {7}, f.f16_bytes);
  for (int i = 0; i < 12 * 2; ++i) f.bf16_bytes.push_back(static_cast<uint8_t>(i * 3));
  f.w.add_tensor("w.bf16", GgmlType::BF16, {3, 2, 2}, f.bf16_bytes);
  for (int i = 0; i < 4 * 18; ++i) f.q4_0_bytes.push_back(static_cast<uint8_t>(i * 7 + 1));
  f.w.add_tensor("w.q4_0", GgmlType::Q4_0, {64, 2}, f.q4_0_bytes);
  for (int i = 0; i < 210; ++i) f.q6_k_bytes.push_back(static_cast<uint8_t>(255 - i));
  f.w.add_tensor("w.q6_k", GgmlType::Q6_K, {256, 1, 1, 1}, f.q6_k_bytes);
  return f;
}

void check_read_back(const GgufReader& r, const Fixture& f) {
  EXPECT_EQ(r.version(), 3u);
  EXPECT_EQ(r.alignment(), 32u);
  EXPECT_EQ(r.metadata().size(), f.kv.size() + 8);
  for (const auto& [k, v] : f.kv) {
    ASSERT_TRUE(r.has(k)) << k;
    expect_same(r.get(k), v, k);
  }
  EXPECT_EQ(r.get_int("s.u32", 0), 7);
  EXPECT_EQ(r.get_int("s.i32", 0), -7);
  EXPECT_EQ(r.get_float("s.f32", 0), 1.5);
  EXPECT_TRUE(r.get_bool("s.bool", false));
  EXPECT_EQ(r.get_string("s.string", ""), "llama2");
  const auto& strs = r.get("s.strings").as_array();
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[1].as_string(), "bc");
  EXPECT_EQ(r.get("s.i32s").as_array()[1].as_int(), -2);
  EXPECT_EQ(r.get("s.f32s").as_array()[1].as_float(), -0.25);
  EXPECT_EQ(r.get_int("absent", 42), 42);
  EXPECT_THROW(r.get_int("s.string", 0), Error);  // wrong kind throws
  EXPECT_THROW(r.get_string("s.u32", ""), Error);
  EXPECT_THROW(r.get("t.u64").as_int(), Error);  // 2^64-1 does not fit int64

  ASSERT_EQ(r.tensors().size(), 5u);
  EXPECT_EQ(r.tensors()[0].name, "w.f32");  // file order is kept
  struct Want { const char* name; GgmlType type; std::vector<int64_t> dims; std::vector<uint8_t> bytes; };
  const std::vector<Want> want = {
      {"w.f32", GgmlType::F32, {5, 3}, bytes_of(f.f32_values.data(), f.f32_values.size() * 4)},
      {"w.f16", GgmlType::F16, {7}, f.f16_bytes},
      {"w.bf16", GgmlType::BF16, {3, 2, 2}, f.bf16_bytes},
      {"w.q4_0", GgmlType::Q4_0, {64, 2}, f.q4_0_bytes},
      {"w.q6_k", GgmlType::Q6_K, {256, 1, 1, 1}, f.q6_k_bytes},
  };
  for (const Want& w : want) {
    const GgufTensorInfo& t = r.tensor(w.name);
    EXPECT_EQ(t.type, w.type) << w.name;
    EXPECT_EQ(t.dims, w.dims) << w.name;
    EXPECT_EQ(t.offset % r.alignment(), 0u) << w.name;
    ASSERT_EQ(t.n_bytes, w.bytes.size()) << w.name;
    EXPECT_EQ(bytes_of(t.data, t.n_bytes), w.bytes) << w.name;
  }
  EXPECT_EQ(r.tensor("w.bf16").n_elements(), 12);
}

TEST(GgufWriter, RoundTripInMemory) {
  const Fixture f = make_fixture();
  const std::vector<uint8_t> bytes = f.w.to_bytes();
  GgufReader r(bytes.data(), bytes.size());
  check_read_back(r, f);
  // Data section start and every tensor address are aligned relative to the file start.
  for (const GgufTensorInfo& t : r.tensors()) EXPECT_EQ((t.data - bytes.data()) % 32, 0) << t.name;
}

TEST(GgufWriter, RoundTripThroughFile) {
  const Fixture f = make_fixture();
  const std::string path = test::temp_dir() + "/roundtrip.gguf";
  f.w.write(path);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  GgufReader r(path);
  EXPECT_EQ(r.path(), path);
  check_read_back(r, f);
}

TEST(GgufWriter, Version2ReadsTheSame) {
  // v2 and v3 share the little-endian layout; only the version field differs.
  const Fixture f = make_fixture();
  std::vector<uint8_t> bytes = f.w.to_bytes();
  bytes[4] = 2;
  GgufReader r(bytes.data(), bytes.size());
  EXPECT_EQ(r.version(), 2u);
  EXPECT_EQ(r.tensors().size(), 5u);
}

TEST(GgufWriter, CustomAlignment) {
  GgufWriter w;
  w.set_u32("general.alignment", 256);
  w.add_f32_tensor("a", {3}, {1, 2, 3});
  w.add_f32_tensor("b", {2}, {4, 5});
  const std::vector<uint8_t> bytes = w.to_bytes();
  GgufReader r(bytes.data(), bytes.size());
  EXPECT_EQ(r.alignment(), 256u);
  EXPECT_EQ(r.tensor("a").offset, 0u);
  EXPECT_EQ(r.tensor("b").offset, 256u);
  EXPECT_EQ((r.tensor("b").data - bytes.data()) % 256, 0);
  float b1;
  std::memcpy(&b1, r.tensor("b").data + 4, 4);
  EXPECT_EQ(b1, 5.0f);
}

TEST(GgufWriter, EmptyFileHasNoTensorsOrKeys) {
  GgufWriter w;
  const std::vector<uint8_t> bytes = w.to_bytes();
  GgufReader r(bytes.data(), bytes.size());
  EXPECT_TRUE(r.metadata().empty());
  EXPECT_TRUE(r.tensors().empty());
}

TEST(GgufWriter, RejectsInconsistentTensors) {
  GgufWriter w;
  EXPECT_THROW(w.add_tensor("x", GgmlType::Q8_0, {32}, std::vector<uint8_t>(33)), Error);  // 34 bytes needed
  EXPECT_THROW(w.add_tensor("x", GgmlType::Q8_0, {16}, std::vector<uint8_t>(17)), Error);  // partial block
  EXPECT_THROW(w.add_tensor("x", GgmlType::F32, {}, {}), Error);
  EXPECT_THROW(w.add_tensor("x", GgmlType::F32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)), Error);
  EXPECT_THROW(w.add_tensor("x", static_cast<GgmlType>(99), {1}, std::vector<uint8_t>(4)), Error);
  w.add_f32_tensor("x", {1}, {1.0f});
  EXPECT_THROW(w.add_f32_tensor("x", {1}, {1.0f}), Error);
  EXPECT_THROW(gguf_array(VT::INT32, {gguf_uint(VT::UINT32, 1)}), Error);
  EXPECT_THROW(gguf_uint(VT::INT32, 1), Error);
}

TEST(GgufWriter, WriteToBadPathThrowsAndLeavesNothing) {
  GgufWriter w;
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), Error);
}

}  // namespace
}  // namespace mpkv
