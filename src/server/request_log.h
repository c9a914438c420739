// The --log-requests line: one line per request with its latency and token counts. Every
// byte a client chose (method, target) is escaped, so a request cannot forge log lines
// (CR, LF and every other control byte become \xHH; quote and backslash are escaped).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace detllm::server {

// `s` with bytes < 0x20, 0x7f and >= 0x80 as \xHH, '"' as \" and '\' as \\.
std::string log_escape(std::string_view s);

struct RequestLogEntry {
  std::string_view remote;  // "127.0.0.1:51234"
  std::string_view method;
  std::string_view target;
  int status = 0;
  double latency_s = 0.0;         // request fully read -> response fully written
  int32_t prompt_tokens = -1;     // -1: not a generation
  int32_t completion_tokens = -1;
};

// detllm serve: 127.0.0.1:51234 "POST /v1/completions" 200 0.123s prompt_tokens=5 ...
std::string format_request_log(const RequestLogEntry& e);

}  // namespace detllm::server
