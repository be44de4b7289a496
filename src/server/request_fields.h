// The two helpers every request parser of this folder reads JSON with (openai_request,
// tool_request, reasoning_request, constraint_fields; docs/serving.md, "Requests"): a member that
// is absent or null reads as absent (OpenAI treats an explicit null as "not given"), and a bad
// value is an input error, ApiError(400) naming the field.
#pragma once
#include <string>

#include "server/api_error.h"

namespace mpkv::server::request_fields {

inline ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

// Json: nlohmann::json or nlohmann::ordered_json.
template <class Json>
const Json* field(const Json& obj, const std::string& name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace mpkv::server::request_fields
