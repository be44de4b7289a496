// libFuzzer entry: any byte string must parse or throw mpkv::Error; anything else (a crash, an
// ASan report, another exception type) is a bug. Built only with -DMPKV_FUZZ=ON (clang).
// When it parses, walk everything the reader returned, so a bad pointer or size shows up here.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gguf/dequant.h"
#include "gguf/gguf_reader.h"
#include "util/error.h"

namespace {

size_t walk(const mpkv::GgufValue& v) {
  if (v.is_array()) {
    size_t n = 1;
    for (const auto& item : v.as_array()) n += walk(item);
    return n;
  }
  return 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    mpkv::GgufReader r(data, size, "<fuzz>");
    size_t n = 0;
    for (const auto& [key, value] : r.metadata()) n += walk(value) + key.size();
    uint8_t sink = 0;
    std::vector<float> row;
    for (const mpkv::GgufTensorInfo& t : r.tensors()) {
      if (t.n_bytes > 0) sink ^= t.data[0] ^ t.data[t.n_bytes - 1];  // first and last byte must be readable
      const mpkv::GgmlTypeInfo* info = mpkv::ggml_type_info(static_cast<uint32_t>(t.type));
      if (info->supported && t.dims[0] <= 4096) {  // dequantize the first row
        row.resize(static_cast<size_t>(t.dims[0]));
        mpkv::dequantize_row(t.type, t.data, row.data(), t.dims[0]);
      }
    }
    volatile size_t keep = n + sink;
    (void)keep;
  } catch (const mpkv::Error&) {
  }
  return 0;
}
