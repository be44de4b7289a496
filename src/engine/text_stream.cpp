#include "engine/text_stream.h"

#include <algorithm>

namespace mpkv {

size_t incomplete_utf8_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
    const unsigned char c = (unsigned char)s[s.size() - back];
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

TextStream::TextStream(std::vector<std::string> stop) : stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

std::string TextStream::push(std::string_view piece, bool match_stop) {
  if (stopped_) return {};
  pending_.append(piece);
  if (!match_stop) {
    const size_t hold = incomplete_utf8_tail(pending_);
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
  }
  // The earliest stop string wins.
  size_t hit = std::string::npos;
  for (const std::string& s : stop_) hit = std::min(hit, pending_.find(s));
  if (hit != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, hit);
    pending_.clear();
    return out;
  }
  size_t hold = incomplete_utf8_tail(pending_);
  for (const std::string& s : stop_) {
    // Longest proper prefix of s that ends pending_.
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string TextStream::finish() {
  std::string out;
  if (!stopped_) {
    // A character cut off by the end of generation (a length stop in the middle of it) never
    // completes: it is dropped, so that only whole characters are shown.
    pending_.resize(pending_.size() - incomplete_utf8_tail(pending_));
    out.swap(pending_);
  }
  pending_.clear();
  return out;
}

}  // namespace mpkv
