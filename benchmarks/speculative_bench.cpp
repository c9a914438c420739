// Speculative decoding benchmark (a program, not a test): batch-1 decode tokens/s of the default
// model on the CPU with n-gram drafts against plain decoding, on a repetitive prompt (rewrite a
// given text: the output repeats the prompt, the drafts are accepted) and a non-repetitive one
// (a story: few drafts). Prints each run's figures, the speed-up ratios from this one run, and
// checks that the tokens are identical (docs/speculative.md).
// Run: build/benchmarks/speculative_bench [--model PATH] [--threads T] [--max-tokens N] [--k K]
//                                         [--lookup-min N] [--lookup-max N] [--repeats R]
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "model/bundle.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace detllm;
using Clock = std::chrono::steady_clock;

constexpr const char* kText =
    "The lighthouse stood at the end of a narrow spit of land, its white tower streaked with "
    "salt. Every evening the keeper climbed the one hundred and twelve steps, trimmed the wick, "
    "polished the great lens and wrote the weather in a leather book. Ships passed far out in "
    "the channel, and none of them knew his name.";

struct Figures {
  std::vector<int32_t> tokens;
  double decode_tok_s = 0;
  engine::EngineStats stats;
};

Figures run_one(LlamaModel& model, const Tokenizer& tok, const std::string& prompt, int max_tokens,
                int k, int lookup_min, int lookup_max) {
  engine::EngineConfig cfg;
  cfg.scheduler.max_seqs = 1;
  if (k > 0) {
    cfg.speculative.method = engine::SpeculativeMethod::kNgram;
    cfg.speculative.num_speculative_tokens = k;
    cfg.speculative.prompt_lookup_min = lookup_min;
    cfg.speculative.prompt_lookup_max = lookup_max;
  }
  engine::Engine eng(model, cfg, &tok);
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

}  // namespace

int main(int argc, char** argv) {
  std::string model_path;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int max_tokens = 96;
  int k = 5;
  int lookup_min = 0;  // 0: the engine's default (SpeculativeConfig)
  int lookup_max = 0;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--max-tokens"))
      max_tokens = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--k"))
      k = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lookup-min"))
      lookup_min = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lookup-max"))
      lookup_max = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      fmt::print(stderr,
                 "unknown flag {} (--model, --threads, --max-tokens, --k, --lookup-min, "
                 "--lookup-max, --repeats)\n",
                 argv[i]);
      return 2;
    }
  }
  try {
    ModelBundle b = open_model_bundle(model_path, threads);
    LlamaModel& model = b.engine_model();
    const std::string prompts[2] = {
        fmt::format("Rewrite the following text exactly, word for word.\n\n{}", kText),
        "Write a short story about a lighthouse keeper who finds a message in a bottle."};
    const char* names[2] = {"repetitive (rewrite a text)", "non-repetitive (a story)"};
    engine::SpeculativeConfig shown;  // the bounds the engine runs with (0: its default)
    shown.prompt_lookup_min = lookup_min;
    shown.prompt_lookup_max = lookup_max;
    shown = shown.with_defaults();
    fmt::print(
        "batch 1, greedy, {} new tokens, {} threads, n-gram K = {} (lookup {}..{}), best of {}\n",
        max_tokens, threads, k, shown.prompt_lookup_min, shown.prompt_lookup_max, repeats);
    for (int p = 0; p < 2; ++p) {
      // Plain and speculative runs alternate; each keeps its fastest (a shared machine's
      // noise only slows a run down).
      Figures plain, spec;
      for (int rep = 0; rep < repeats; ++rep) {
        Figures a = run_one(model, *b.tokenizer, prompts[p], max_tokens, 0, 0, 0);
        Figures s = run_one(model, *b.tokenizer, prompts[p], max_tokens, k, lookup_min, lookup_max);
        if (a.decode_tok_s > plain.decode_tok_s) plain = std::move(a);
        if (s.decode_tok_s > spec.decode_tok_s) spec = std::move(s);
      }
      const double acc = spec.stats.n_draft_tokens
                             ? static_cast<double>(spec.stats.n_accepted_draft_tokens) /
                                   static_cast<double>(spec.stats.n_draft_tokens)
                             : 0.0;
      fmt::print(
          "{:28}  plain {:6.1f} tok/s ({} steps)  ngram {:6.1f} tok/s ({} steps, {}/{} drafts "
          "accepted, {:.0f}%)  ratio {:.2f}x  tokens identical: {}\n",
          names[p], plain.decode_tok_s, plain.stats.n_steps, spec.decode_tok_s, spec.stats.n_steps,
          spec.stats.n_accepted_draft_tokens, spec.stats.n_draft_tokens, 100 * acc,
          spec.decode_tok_s / plain.decode_tok_s, plain.tokens == spec.tokens ? "yes" : "NO");
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "speculative_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
