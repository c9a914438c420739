// The bodies of /v1/completions and /v1/chat/completions as ResponseStreams: either SSE
// chunks as tokens arrive (one chunk per choice with new text or logprobs, finish_reason in
// its last chunk, usage in a final chunk when asked, then [DONE]) or one JSON body at the end.
#pragma once

#include <memory>

#include "server/generation.h"
#include "server/response_format.h"
#include "server/response_stream.h"

namespace detllm::server {

struct StreamSpec {
  enum class Api : uint8_t { kCompletion, kChat } api = Api::kCompletion;
  bool stream = false;
  bool echo = false;          // completions: the prompt text (and logprobs) comes first
  bool logprobs = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string echo_text;       // chat echo: the assistant message being continued
  ChatOutputConfig output;     // chat: reasoning and tool-call parsers (choice_index unused)
};

// `generation` must have been start()ed.
std::shared_ptr<ResponseStream> make_generation_stream(std::unique_ptr<Generation> generation,
                                                       ResponseMeta meta,
                                                       const Tokenizer& tokenizer,
                                                       StreamSpec spec);

}  // namespace detllm::server
