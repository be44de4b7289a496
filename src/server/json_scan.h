// Finding where one JSON value ends inside model output (the tool-call parsers read a JSON object
// followed by more text). Only the structure is scanned: strings with their escapes, and nesting of
// objects and arrays; whether the value is valid JSON is left to the JSON parser.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mpkv::server {

// The index just past the JSON object or array that starts at s[pos] ('{' or '['), or npos when
// s[pos] starts neither or the value is not closed within s.
size_t json_container_end(std::string_view s, size_t pos);

// The first index at or after pos that is not JSON whitespace (space, tab, CR, LF); s.size() if none.
size_t skip_json_space(std::string_view s, size_t pos);

// JSON text fed one byte at a time, as a model writes it (the tool-call streamer reads calls with
// it before they are complete): each byte is whitespace between tokens, part of a token, an error,
// or after the end of the (one) value. Checked: the structure, string escapes and control bytes,
// the letters of true / false / null; not checked: the digits' grammar and UTF-8, which the JSON
// parser checks once the value is whole. Nothing it calls an error is valid JSON.
class JsonScanner {
 public:
  enum class Byte : uint8_t { space, token, error, after_end };
  Byte feed(char c);
  int depth() const { return static_cast<int>(stack_.size()); }  // containers open after the last byte
  bool began_value() const { return began_value_; }  // the last byte began a value (not a key)
  bool in_string() const { return state_ == S::string || state_ == S::escape || state_ == S::unicode; }
  bool in_key() const { return in_string() && key_; }  // inside a key (after its opening quote)
  bool complete() const { return state_ == S::done; }

 private:
  enum class S : uint8_t {
    value, key, key_or_close, value_or_close, colon, comma_or_close, string, escape, unicode, number, literal, done, error
  };
  Byte start_value(char c);
  void after_value();
  std::string stack_;  // '{' / '[' of the open containers
  S state_ = S::value;
  bool key_ = false, began_value_ = false;
  int left_ = 0;              // hex digits of \u, or letters of a literal, still to come
  const char* literal_ = "";  // the rest of true / false / null
};

// JSON text without the whitespace between its tokens (strings, numbers and key order exactly as
// written): a tool call's arguments as the model wrote them. `s` must be valid JSON.
std::string minify_json(std::string_view s);

// The members of the valid JSON object `obj`, in the order written: each key decoded, and its value's
// text (not minified).
std::vector<std::pair<std::string, std::string_view>> json_object_members(std::string_view obj);

}  // namespace mpkv::server
