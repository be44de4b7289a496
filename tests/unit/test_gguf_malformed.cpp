// Corrupt GGUF files: a valid fixture from GgufWriter, with chosen bytes overwritten. Every case must
// throw mpkv::Error naming the file and what is wrong (never crash, never read out of bounds: run
// this under -DMPKV_SANITIZE=ON to check the latter). Images are exact-size vectors so ASan sees
// any read past the end.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "gguf/gguf_reader.h"
#include "support/gguf_writer.h"
#include "test_support.h"
#include "util/error.h"

namespace mpkv {
namespace {

using Bytes = std::vector<uint8_t>;
const char* const kName = "fixture.gguf";

// Layout of the fixture (all names unique byte strings, so find() locates them):
//   keys: general.name (string), arr.key (i32 array), str.key (string), dup.aaa, dup.bbb (u32)
//   tensors: tensor.aa F32 [8, 2], tensor.bb Q8_0 [32]
Bytes fixture() {
  GgufWriter w;
  w.set_string("general.name", "tiny");
  w.set_i32_array("arr.key", {1, 2, 3});
  w.set_string("str.key", "value");
  w.set_u32("dup.aaa", 1);
  w.set_u32("dup.bbb", 2);
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = (float)i;
  w.add_f32_tensor("tensor.aa", {8, 2}, v);
  Bytes q8(34, 1);
  w.add_tensor("tensor.bb", GgmlType::Q8_0, {32}, q8);
  return w.to_bytes();
}

size_t find(const Bytes& b, const std::string& s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  EXPECT_NE(it, b.end()) << s;
  return static_cast<size_t>(it - b.begin());
}
void put_u32(Bytes& b, size_t pos, uint32_t v) { std::memcpy(b.data() + pos, &v, 4); }
void put_u64(Bytes& b, size_t pos, uint64_t v) { std::memcpy(b.data() + pos, &v, 8); }

// Field positions after a name: a key "k" is followed by u32 type then the value; a tensor name
// by u32 n_dims, u64 dims[n_dims], u32 type, u64 offset.
size_t key_type_at(const Bytes& b, const std::string& key) { return find(b, key) + key.size(); }
size_t tensor_field_at(const Bytes& b, const std::string& name) { return find(b, name) + name.size(); }

void expect_error(const Bytes& b, const std::string& what) {
  try {
    GgufReader r(b.data(), b.size(), kName);
    ADD_FAILURE() << "no error; expected one mentioning '" << what << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(kName), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nexpected to contain: " << what;
  }
}

TEST(GgufMalformed, FixtureIsValid) {
  const Bytes b = fixture();
  GgufReader r(b.data(), b.size(), kName);
  EXPECT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.metadata().size(), 5u);
}

TEST(GgufMalformed, TruncatedHeader) {
  const Bytes b = fixture();
  expect_error(Bytes(b.begin(), b.begin() + 10), "smaller than a GGUF header");
  expect_error(Bytes(), "smaller than a GGUF header");
}

TEST(GgufMalformed, TruncationAnywhereBeforeTheLastTensorByteThrows) {
  const Bytes b = fixture();
  size_t end = 0;  // one past the last tensor byte (the rest is padding)
  {
    GgufReader r(b.data(), b.size(), kName);
    for (const GgufTensorInfo& t : r.tensors()) end = std::max(end, (size_t)(t.data - b.data()) + t.n_bytes);
  }
  ASSERT_LT(end, b.size());
  for (size_t cut = 0; cut < end; ++cut) {
    const Bytes part(b.begin(), b.begin() + cut);
    EXPECT_THROW(GgufReader(part.data(), part.size(), kName), Error) << "cut at " << cut;
  }
  const Bytes exact(b.begin(), b.begin() + end);  // the check is tight: this one is valid
  EXPECT_NO_THROW(GgufReader(exact.data(), exact.size(), kName));
}

TEST(GgufMalformed, BadMagicAndVersions) {
  Bytes b = fixture();
  b[0] = 'X';
  expect_error(b, "not a GGUF file");
  b = fixture();
  put_u32(b, 4, 1);
  expect_error(b, "GGUF version 1 is not supported");
  put_u32(b, 4, 4);
  expect_error(b, "unsupported GGUF version 4");
  put_u32(b, 4, 0x03000000);
  expect_error(b, "big-endian");
}

TEST(GgufMalformed, AbsurdCounts) {
  Bytes b = fixture();
  put_u64(b, 8, uint64_t{1} << 62);  // n_tensors
  expect_error(b, "tensor count is 4611686018427387904");
  b = fixture();
  put_u64(b, 16, ~uint64_t{0});  // n_kv
  expect_error(b, "metadata count is 18446744073709551615");
  b = fixture();
  put_u64(b, 16, 6);  // one more key than present: the tensor infos get read as a key
  EXPECT_THROW(GgufReader(b.data(), b.size(), kName), Error);
  b = fixture();
  put_u64(b, find(b, "general.name") - 8, uint64_t{1} << 60);  // key length
  expect_error(b, "metadata key has length 1152921504606846976");
  b = fixture();
  put_u64(b, key_type_at(b, "arr.key") + 8, uint64_t{1} << 61);  // after type ARRAY, elem type
  expect_error(b, "array length of key 'arr.key' (INT32) is 2305843009213693952");
  b = fixture();
  put_u64(b, key_type_at(b, "str.key") + 4, ~uint64_t{0});  // string value length
  expect_error(b, "string value has length 18446744073709551615");
}

TEST(GgufMalformed, UnknownValueTypes) {
  Bytes b = fixture();
  put_u32(b, key_type_at(b, "str.key"), 13);
  expect_error(b, "key 'str.key' has unknown value type 13");
  b = fixture();
  put_u32(b, key_type_at(b, "arr.key") + 4, 99);  // array element type
  expect_error(b, "key 'arr.key' has unknown value type 99");
}

TEST(GgufMalformed, DuplicateKeyAndTensorName) {
  Bytes b = fixture();
  const size_t k = find(b, "dup.bbb");
  std::memcpy(b.data() + k, "dup.aaa", 7);
  expect_error(b, "duplicate metadata key 'dup.aaa'");
  b = fixture();
  const size_t t = find(b, "tensor.bb");
  std::memcpy(b.data() + t, "tensor.aa", 9);
  expect_error(b, "duplicate tensor name 'tensor.aa'");
}

TEST(GgufMalformed, UnknownTensorType) {
  Bytes b = fixture();
  const size_t type_at = tensor_field_at(b, "tensor.bb") + 4 + 8;
  put_u32(b, type_at, 99);
  expect_error(b, "tensor 'tensor.bb' has unknown ggml type id 99");
  put_u32(b, type_at, 4);  // Q4_2, removed from ggml
  expect_error(b, "tensor 'tensor.bb' has unknown ggml type id 4");
}

TEST(GgufMalformed, KnownButUnsupportedTypeReadsFine) {
  // A Q2_K tensor is a valid file; only dequantizing it is unsupported (checked in dequant tests).
  GgufWriter w;
  w.add_tensor("q2k", GgmlType::Q2_K, {256}, Bytes(84));
  const Bytes b = w.to_bytes();
  GgufReader r(b.data(), b.size(), kName);
  EXPECT_EQ(r.tensor("q2k").type, GgmlType::Q2_K);
}

TEST(GgufMalformed, BadTensorOffsets) {
  const Bytes good = fixture();
  const size_t off_at = tensor_field_at(good, "tensor.bb") + 4 + 8 + 4;
  Bytes b = good;
  uint64_t off;
  std::memcpy(&off, b.data() + off_at, 8);
  ASSERT_EQ(off, 64u);  // tensor.aa is 64 bytes, so tensor.bb follows at the next multiple of 32
  put_u64(b, off_at, off + 4);
  expect_error(b, "tensor 'tensor.bb' offset 68 is not a multiple of the alignment 32");
  put_u64(b, off_at, uint64_t{1} << 40);
  expect_error(b, "extends past the end of the file");
  put_u64(b, off_at, ~uint64_t{31});  // aligned, and offset + size wraps around 2^64
  expect_error(b, "extends past the end of the file");
  put_u64(b, off_at, 96);  // starts inside the padding, ends past the file end
  expect_error(b, "extends past the end of the file");
  put_u64(b, off_at, 32);  // inside tensor.aa
  expect_error(b, "overlap");
}

TEST(GgufMalformed, BadDims) {
  const Bytes good = fixture();
  const size_t nd_at = tensor_field_at(good, "tensor.aa");  // n_dims = 2, dims at +4, +12
  Bytes b = good;
  put_u64(b, nd_at + 4, uint64_t{1} << 32);
  put_u64(b, nd_at + 12, uint64_t{1} << 32);
  expect_error(b, "tensor 'tensor.aa' element count overflows");
  b = good;
  put_u64(b, nd_at + 4, uint64_t{1} << 31);
  put_u64(b, nd_at + 12, uint64_t{1} << 31);  // 2^62 elements fit, 2^64 bytes do not
  expect_error(b, "tensor 'tensor.aa' byte size overflows");
  b = good;
  put_u64(b, nd_at + 4, uint64_t{1} << 20);  // fits in size_t but not in the file
  expect_error(b, "extends past the end of the file");
  b = good;
  put_u64(b, nd_at + 12, 0);
  expect_error(b, "tensor 'tensor.aa' has dimension 1 = 0");
  b = good;
  put_u64(b, nd_at + 4, uint64_t{1} << 63);
  expect_error(b, "tensor 'tensor.aa' has dimension 0 = 9223372036854775808");
  b = good;
  put_u32(b, nd_at, 5);
  expect_error(b, "tensor 'tensor.aa' has 5 dimensions");
  put_u32(b, nd_at, 0);
  expect_error(b, "tensor 'tensor.aa' has 0 dimensions");
  b = good;
  put_u64(b, tensor_field_at(b, "tensor.bb") + 4, 16);  // Q8_0 row of 16: half a block
  expect_error(b, "row length 16, not a multiple of the block size 32");
}

TEST(GgufMalformed, BadAlignment) {
  GgufWriter w;
  w.set_u32("general.alignment", 64);
  w.add_f32_tensor("x", {4}, {1, 2, 3, 4});
  const Bytes good = w.to_bytes();
  const size_t val_at = key_type_at(good, "general.alignment") + 4;
  {
    GgufReader r(good.data(), good.size(), kName);
    EXPECT_EQ(r.alignment(), 64u);
  }
  Bytes b = good;
  put_u32(b, val_at, 0);
  expect_error(b, "general.alignment is 0, must be a nonzero power of two");
  put_u32(b, val_at, 48);
  expect_error(b, "general.alignment is 48");
  b = good;
  put_u32(b, val_at - 4, static_cast<uint32_t>(GgufValueType::FLOAT32));
  expect_error(b, "general.alignment is not an integer");
}

// An array nested `depth` levels deep (the innermost holds one u8).
GgufValue nested(int depth) {
  GgufValue v = gguf_array(GgufValueType::UINT8, {gguf_uint(GgufValueType::UINT8, 1)});
  for (int i = 1; i < depth; ++i) v = gguf_array(GgufValueType::ARRAY, {v});
  return v;
}

TEST(GgufMalformed, ArrayNestingIsBounded) {
  // Recursion depth is bounded so a file of nested array headers cannot overflow the stack.
  GgufWriter w;
  w.set("deep", nested(16));
  Bytes b = w.to_bytes();
  EXPECT_NO_THROW(GgufReader(b.data(), b.size(), kName));
  w.set("deep", nested(17));
  b = w.to_bytes();
  expect_error(b, "key 'deep' nests arrays deeper than 16 levels");
}

TEST(GgufMalformed, ErrorsFromFilesNameThePath) {
  Bytes b = fixture();
  put_u32(b, 4, 1);
  const std::string path = test::temp_dir() + "/v1.gguf";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), (std::streamsize)b.size());
  try {
    GgufReader r(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": GGUF version 1"), std::string::npos) << e.what();
  }
  const std::string empty = test::temp_dir() + "/empty.gguf";
  std::ofstream(empty, std::ios::binary).close();
  EXPECT_THROW(GgufReader{empty}, Error);
  EXPECT_THROW(GgufReader{test::temp_dir() + "/does-not-exist.gguf"}, Error);
}

}  // namespace
}  // namespace mpkv
