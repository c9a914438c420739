// The batch-1 speculative decoding run shared by speculative_bench (CPU) and
// cuda_speculative_bench (GPU): the prompts — a repetitive one (rewrite a given text: the output
// repeats the prompt, n-gram drafts are accepted) and a non-repetitive one (a story) — in the
// model's chat template, greedy, and one engine run timed from the first token (decode tok/s).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/llama_model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace detllm::bench_util {

inline constexpr const char* kSpeculativeText =
    "The lighthouse stood at the end of a narrow spit of land, its white tower streaked with "
    "salt. Every evening the keeper climbed the one hundred and twelve steps, trimmed the wick, "
    "polished the great lens and wrote the weather in a leather book. Ships passed far out in "
    "the channel, and none of them knew his name.";

// The two prompts (user messages) and their names, repetitive first.
inline std::vector<std::string> speculative_prompts() {
  return {std::string("Rewrite the following text exactly, word for word.\n\n") + kSpeculativeText,
          "Write a short story about a lighthouse keeper who finds a message in a bottle."};
}
inline std::vector<std::string> speculative_prompt_names() {
  return {"repetitive (rewrite a text)", "non-repetitive (a story)"};
}

struct Figures {
  std::vector<int32_t> tokens;
  double decode_tok_s = 0;
  engine::EngineStats stats;
};

struct Setup {
  std::string label;
  engine::SpeculativeMethod method = engine::SpeculativeMethod::kNone;
  bool adaptive = false;
};

// One request of `prompt` (a user message in the chat template), greedy, max_tokens new tokens
// past EOS, alone in an engine of max_seqs 1 with `setup`'s drafting; `graphs` the engine's
// EngineConfig::cuda_graphs.
inline Figures run_one(LlamaModel& model, const LlamaModel* draft, const Tokenizer& tok,
                       const std::string& prompt, int max_tokens, const Setup& setup, int k,
                       int lookup_min, int lookup_max, GraphMode graphs = GraphMode::kAuto) {
  using Clock = std::chrono::steady_clock;
  engine::EngineConfig cfg;
  cfg.scheduler.max_seqs = 1;
  cfg.cuda_graphs = graphs;
  cfg.speculative.method = setup.method;
  cfg.speculative.adaptive = setup.adaptive;
  cfg.speculative.num_speculative_tokens = k;
  cfg.speculative.prompt_lookup_min = lookup_min;
  cfg.speculative.prompt_lookup_max = lookup_max;
  engine::Engine eng(model, cfg, &tok,
                     setup.method == engine::SpeculativeMethod::kDraftModel ? draft : nullptr);
  engine::Request req;
  // The model's chat template around the user's message (SmolLM2-Instruct answers a chat).
  const ChatTemplate chat = ChatTemplate::parse(tok.chat_template());
  req.prompt = tok.encode(chat.render({ChatMessage{"user", prompt, {}}}, true, "", ""),
                          /*add_special_tokens=*/false);
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0;
  Figures f;
  Clock::time_point t_first;
  engine::RequestCallbacks cb;
  cb.on_token = [&](const engine::TokenEvent& e) {
    if (f.tokens.empty()) t_first = Clock::now();
    f.tokens.push_back(e.token);
  };
  eng.add_request(req, cb);
  eng.run_until_idle();
  const double s = std::chrono::duration<double>(Clock::now() - t_first).count();
  f.decode_tok_s = f.tokens.size() > 1 ? static_cast<double>(f.tokens.size() - 1) / s : 0.0;
  f.stats = eng.stats();
  return f;
}

}  // namespace detllm::bench_util
