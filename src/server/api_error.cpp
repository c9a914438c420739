// OpenAI-style error bodies.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace detllm::server {

std::string error_type_for_status(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.what()},
                        {"type", e.type()},
                        {"param", e.param().empty() ? nlohmann::json() : nlohmann::json(e.param())},
                        {"code", e.code().empty() ? nlohmann::json() : nlohmann::json(e.code())}};
  return nlohmann::json{{"error", std::move(err)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace detllm::server
