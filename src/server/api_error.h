// ApiError: a failure the HTTP client caused (or must be told about), carried as an exception
// from parsing/validation up to the router, which turns it into an HTTP status and an
// OpenAI-style body {"error": {"message", "type", "param", "code"}} that clients already parse.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>
#include <utility>

namespace detllm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = {}, std::string code = {})
      : std::runtime_error(std::move(message)),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }  // the offending field, "" if none
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_;
  std::string param_;
  std::string code_;
};

// 400 invalid_request_error naming `param`, e.g. bad_request("temperature", "must be ...").
template <typename... Args>
[[noreturn]] void throw_bad_request(std::string param, fmt::format_string<Args...> format,
                                    Args&&... args) {
  throw ApiError(400, fmt::format(format, std::forward<Args>(args)...), "invalid_request_error",
                 std::move(param));
}

// The JSON error body for `e` (serialized).
std::string error_body(const ApiError& e);
// The OpenAI error type for an HTTP status without a more specific one
// (400 invalid_request_error, 401 authentication_error, 404 not_found_error, ...).
std::string error_type_for_status(int status);

}  // namespace detllm::server
