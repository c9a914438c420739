// --log-requests lines (see request_log.h).
#include "server/request_log.h"

#include <fmt/format.h>

namespace detllm::server {

std::string log_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out;
}

std::string format_request_log(const RequestLogEntry& e) {
  std::string line = fmt::format("detllm serve: {} \"{} {}\" {} {:.6f}s", log_escape(e.remote),
                                 log_escape(e.method), log_escape(e.target), e.status,
                                 e.latency_s);
  if (e.prompt_tokens >= 0) line += fmt::format(" prompt_tokens={}", e.prompt_tokens);
  if (e.completion_tokens >= 0) line += fmt::format(" completion_tokens={}", e.completion_tokens);
  line += '\n';
  return line;
}

}  // namespace detllm::server
