// UTF-8 helpers for the tokenizer: decoding one code point, encoding one, and making text valid.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mpkv {

inline constexpr uint32_t kUtf8Replacement = 0xFFFD;

// Appends the UTF-8 encoding of code point cp (must be <= 0x10FFFF) to out.
void utf8_append(std::string& out, uint32_t cp);

// Decodes the code point starting at s[pos] with the same rules as llama.cpp's
// unicode_cpts_from_utf8: a malformed or truncated sequence consumes exactly one byte and yields
// U+FFFD. Surrogates and values above U+10FFFF also yield U+FFFD (and consume their bytes), so the
// result can always be re-encoded as valid UTF-8. Sets len to the number of bytes consumed.
uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len);

// True when s is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF).
bool utf8_is_valid(std::string_view s);

// Returns s with every malformed sequence replaced as utf8_decode does (each bad byte -> U+FFFD,
// overlong forms re-encoded canonically). Valid input is returned unchanged.
std::string utf8_sanitize(std::string_view s);

}  // namespace mpkv
