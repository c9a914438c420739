// ServerOptions validation.
#include "server/server_options.h"

#include "core/error.h"
#include "server/tools/reasoning_parser.h"
#include "server/tools/tool_parser.h"

namespace detllm::server {

void ServerOptions::validate() const {
  check(port >= 0 && port <= 65535, "--port must be in 0…65535, got {}", port);
  check(!model_names.empty(), "the server needs at least one model name");
  check(limits.max_body_bytes >= 1024, "--max-body-bytes must be at least 1024, got {}",
        limits.max_body_bytes);
  check(limits.max_prompt_tokens >= 0, "--max-prompt-tokens must be >= 0, got {}",
        limits.max_prompt_tokens);
  check(limits.max_tokens >= 1, "--max-tokens-limit must be >= 1, got {}", limits.max_tokens);
  check(limits.max_n >= 1 && limits.max_n <= 128, "--max-n must be in 1…128, got {}",
        limits.max_n);
  check(limits.max_prompts >= 1, "--max-prompts must be >= 1, got {}", limits.max_prompts);
  check(http_threads >= 2, "--http-threads must be >= 2, got {}", http_threads);
  check(keep_alive_timeout_s >= 1, "--keep-alive-timeout must be >= 1 s, got {}",
        keep_alive_timeout_s);
  check(header_timeout_s >= 1, "--header-timeout must be >= 1 s, got {}", header_timeout_s);
  check(request_timeout_s >= 1, "--request-timeout must be >= 1 s, got {}", request_timeout_s);
  check(write_timeout_s >= 1, "--write-timeout must be >= 1 s, got {}", write_timeout_s);
  check(max_connections >= 1, "--max-connections must be >= 1, got {}", max_connections);
  for (const std::string& o : cors_origins) {
    check(!o.empty() && o.find_first_of(" \t\r\n,") == std::string::npos,
          "--cors-origin must be one origin (e.g. https://example.com) or *, got '{}'", o);
  }
  check(drain_timeout_s >= 0, "--drain-timeout must be >= 0 s, got {}", drain_timeout_s);
  check(tool_call_parser == "auto" || tool_parser_from_name(tool_call_parser).has_value(),
        "--tool-call-parser must be auto, none, llama3_json, hermes or mistral, got '{}'",
        tool_call_parser);
  check(reasoning_parser_from_name(reasoning_parser).has_value(),
        "--reasoning-parser must be none, deepseek_r1 or qwen3, got '{}'", reasoning_parser);
}

}  // namespace detllm::server
