// Incremental detokenization with stop strings (engine/request.h): tokens go in one at a time,
// text comes out as soon as it is safe to show. Held back: a trailing incomplete UTF-8 character
// (dropped if the request ends before it completes), and the longest tail that is a prefix of some stop string (it may still become one). When a stop
// string appears, the text before it is released, the rest is dropped and stopped() turns true.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mpkv {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop);

  // Adds the bytes of one token; returns the text that became safe to show. match_stop = false:
  // stop strings are not looked for (nor held back) in this push; later pushes look only at what is
  // still held (the engine's min_tokens).
  std::string push(std::string_view piece, bool match_stop = true);
  // At the end of the request: everything still held (unless a stop string was hit), less a
  // trailing incomplete UTF-8 character, which is dropped.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string pending_;  // bytes not shown yet
  bool stopped_ = false;
};

// Bytes at the end of s that start a UTF-8 character whose continuation bytes have not all arrived
// (0 when s ends on a character boundary or with invalid bytes that can never complete).
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace mpkv
