// Finding where one JSON value ends inside model output (the tool-call parsers read a JSON object
// followed by more text). Only the structure is scanned: strings with their escapes, and nesting of
// objects and arrays; whether the value is valid JSON is left to the JSON parser.
#pragma once
#include <cstddef>
#include <string_view>

namespace mpkv::server {

// The index just past the JSON object or array that starts at s[pos] ('{' or '['), or npos when
// s[pos] starts neither or the value is not closed within s.
size_t json_container_end(std::string_view s, size_t pos);

// The first index at or after pos that is not JSON whitespace (space, tab, CR, LF); s.size() if none.
size_t skip_json_space(std::string_view s, size_t pos);

}  // namespace mpkv::server
