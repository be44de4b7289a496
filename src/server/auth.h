// API-key checks (docs/serving.md, "Authentication").
#pragma once
#include <string_view>

namespace mpkv::server {

// a == b, in a time that depends only on the lengths, not on where the first difference is, so a
// client cannot find the key one byte at a time by timing.
bool constant_time_equals(std::string_view a, std::string_view b);

// Whether an Authorization header value is "Bearer <key>" (scheme case-insensitive). An empty key
// means no key is configured: everything is authorized.
bool bearer_authorized(std::string_view authorization, std::string_view key);

}  // namespace mpkv::server
