#include "tokenizer/utf8.h"

namespace mpkv {

void utf8_append(std::string& out, uint32_t cp) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t utf8_decode(std::string_view s, size_t pos, size_t& len) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const uint8_t b0 = byte(pos);
  len = 1;
  if (b0 < 0x80) return b0;
  uint32_t cp;
  size_t n;
  if ((b0 & 0xE0) == 0xC0) {
    cp = b0 & 0x1F, n = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    cp = b0 & 0x0F, n = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    cp = b0 & 0x07, n = 4;
  } else {
    return kUtf8Replacement;  // continuation byte or 0xF8..0xFF as a lead byte
  }
  for (size_t k = 1; k < n; ++k) {
    if (!cont(pos + k)) return kUtf8Replacement;
    cp = (cp << 6) | (byte(pos + k) & 0x3F);
  }
  len = n;
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kUtf8Replacement;
  return cp;
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b0 = static_cast<uint8_t>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    const uint32_t cp = utf8_decode(s, i, len);
    if (cp == kUtf8Replacement) {
      // A genuine U+FFFD is EF BF BD; anything else that decoded to it was malformed.
      if (!(len == 3 && b0 == 0xEF && static_cast<uint8_t>(s[i + 1]) == 0xBF &&
            static_cast<uint8_t>(s[i + 2]) == 0xBD)) {
        return false;
      }
    }
    const size_t need = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (need != len) return false;  // overlong form
    i += len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  if (utf8_is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    const uint32_t cp = utf8_decode(s, i, len);
    utf8_append(out, cp);
    i += len;
  }
  return out;
}

}  // namespace mpkv
