// What /v1/completions and /v1/chat/completions do once their prompts are tokenized and their
// requests built: start the generation and reply with its stream.
#pragma once

#include <string_view>
#include <vector>

#include "server/generation.h"
#include "server/generation_stream.h"
#include "server/handlers.h"
#include "server/request_builder.h"

namespace detllm::server {

// Starts the generation of `built` (one PromptState per prompt) on the engine loop and returns
// the reply that carries it: the response meta's headers (id `id_prefix`-...), and the body as
// SSE chunks when gen.stream, else one JSON body. spec gives the endpoint's api and echo;
// its stream, logprobs and include_usage are set here from gen.
HttpReply start_generation_reply(ServerContext& ctx, const GenerationFields& gen,
                                 const BuiltRequests& built, std::vector<PromptState> prompts,
                                 std::string_view id_prefix, StreamSpec spec);

}  // namespace detllm::server
