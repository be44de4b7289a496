// GPT-2 byte-level encoding: each of the 256 byte values is shown as one printable code point,
// so that any byte string becomes a string of vocabulary characters.
//   bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF map to the code point of the same value;
//   the remaining 68 bytes (0x00..0x20, 0x7F..0xA0, 0xAD), in increasing order, map to U+0100, U+0101, ...
// (so ' ' -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace mpkv {

// The code point that stands for byte b.
uint32_t byte_to_unicode(uint8_t b);
// UTF-8 of byte_to_unicode(b) (1 or 2 bytes).
const std::string& byte_to_unicode_utf8(uint8_t b);
// The byte that code point cp stands for, or -1 when cp is not one of the 256 mapped code points.
int unicode_to_byte(uint32_t cp);

// Byte-encodes raw text: each byte replaced by the UTF-8 of its mapped code point.
std::string bytes_to_unicode_text(std::string_view raw);

}  // namespace mpkv
