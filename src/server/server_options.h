// ServerOptions: everything `detllm serve` configures outside the engine — where to listen,
// the API key, request limits and HTTP threading. One struct, validated once, passed by const&
// to the router and the handlers (the engine's own settings stay in engine::EngineConfig).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detllm::server {

// Per-request limits; a request over any of them gets a 400 (413 for the body size).
struct RequestLimits {
  size_t max_body_bytes = 4 << 20;  // bytes of a request body
  int32_t max_prompt_tokens = 0;    // tokens of one prompt; 0 = the model's context
  int32_t max_tokens = 4096;        // max_tokens a request may ask for
  int32_t max_n = 16;               // samples per prompt
  int32_t max_prompts = 64;         // prompts in one /v1/completions request (a list)
  int32_t max_stop = 8;             // stop strings
  int32_t max_messages = 1024;      // chat messages
  size_t max_string_bytes = 1 << 20;  // any single string field (prompt, message, stop)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (printed at start)
  std::string api_key;  // "" = no authentication
  RequestLimits limits;
  // Names a request's "model" may use; the first is what responses report. A request without
  // "model" gets the first.
  std::vector<std::string> model_names;
  // Worker threads that run the blocking part of a handler (parse, tokenize, wait for the
  // engine's admission). Connections and streams hold no thread (docs/server.md).
  int http_threads = 32;
  int keep_alive_timeout_s = 5;    // an idle keep-alive connection is closed after this long
  int header_timeout_s = 10;       // a request's header must arrive within this long
  int request_timeout_s = 60;      // ... and its body within this long of the header
  int write_timeout_s = 10;        // a client that accepts no bytes this long is cut off
  int max_connections = 4096;      // open connections; further accepts wait
  int drain_timeout_s = 30;        // SIGTERM: wait this long for in-flight requests
  bool log_requests = false;       // one stderr line per request
  // CORS (opt-in): origins allowed to call the API from a browser; "*" = any. Empty = no
  // CORS headers and OPTIONS gets 405.
  std::vector<std::string> cors_origins;
  // Chat output parsers (vLLM's options; docs/server.md, "Tool calling and reasoning"):
  // tool calls: auto (from the chat template's markers), none, llama3_json, hermes, mistral;
  // reasoning: none, deepseek_r1, qwen3.
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "none";

  void validate() const;  // throws detllm::Error naming the bad option
};

}  // namespace detllm::server
