// An error answered to an HTTP client in OpenAI's shape (docs/serving.md, "Errors"):
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "temperature", "code": null}}
// ApiError is an input error (bad request, missing auth, full queue); the one exception is
// internal_server_error(), built where a bug is caught to answer it as 500.
#pragma once
#include <string>

#include "util/error.h"

namespace mpkv::server {

class ApiError : public Error {
 public:
  // status: the HTTP status (400, 401, 404, 413, 503...); type: OpenAI's error type;
  // param: the offending field ("" -> null); code: a machine-readable code ("" -> null).
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error")
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// What a client gets for a bug (InternalError or any exception that is not an Error): 500,
// type "server_error", a fixed message; the real one goes to the server's log only
// (docs/serving.md, "Errors").
ApiError internal_server_error();

// The JSON body of an error response.
std::string error_body(const ApiError& e);

}  // namespace mpkv::server
