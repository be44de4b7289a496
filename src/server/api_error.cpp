#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace mpkv::server {

ApiError internal_server_error() {
  return ApiError(500, "the server had an internal error (it is logged on the server)", "", "", "server_error");
}

std::string error_body(const ApiError& e) {
  using json = nlohmann::json;
  json err = {{"message", e.what()},
              {"type", e.type()},
              {"param", e.param().empty() ? json(nullptr) : json(e.param())},
              {"code", e.code().empty() ? json(nullptr) : json(e.code())}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace mpkv::server
