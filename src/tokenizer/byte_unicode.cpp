#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace mpkv {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  std::array<int16_t, 512> from_cp{};  // every mapped code point is below 0x144

  ByteTables() {
    from_cp.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next_extra++;
      utf8_append(to_utf8[b], to_cp[b]);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return tables().to_cp[b]; }

const std::string& byte_to_unicode_utf8(uint8_t b) { return tables().to_utf8[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? tables().from_cp[cp] : -1; }

std::string bytes_to_unicode_text(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += byte_to_unicode_utf8(static_cast<uint8_t>(c));
  return out;
}

}  // namespace mpkv
