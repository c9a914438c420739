// Speculative decoding end to end on the GPU (a program, not a test): batch-1 decode tokens/s of
// the default model (SmolLM2-135M-Instruct GGUF, or --model) on the CUDA backend, invariant
// numerics, with n-gram drafts against plain decoding, on the CPU benchmark's prompts
// (speculative_common.h: a repetitive one — rewrite a given text — and a story), greedy.
// Each setup with CUDA graphs on (the engine's default on CUDA: decode steps, and verify steps
// with their windows as decode rows, replayed from graphs) and off (eager; windows verified as
// chunks). Prints tokens/s, the ratio to plain decoding with graphs, steps, drafts accepted,
// verify steps replayed, and whether the tokens equal plain decoding's (docs/speculative.md).
// Run: build/benchmarks/cuda_speculative_bench [--model PATH] [--max-tokens N] [--k K]
//        [--lookup-min N] [--lookup-max N] [--repeats R]
// (exits without a CUDA device)
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "determinism/modes.h"
#include "engine/engine.h"
#include "kernels/cuda/cuda_ops.h"
#include "model/bundle.h"
#include "speculative_common.h"

using namespace detllm;
using bench_util::Figures;
using bench_util::run_one;
using bench_util::Setup;

int main(int argc, char** argv) {
  std::string model_path;
  int max_tokens = 128, k = 5, lookup_min = 0, lookup_max = 0, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--max-tokens"))
      max_tokens = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--k"))
      k = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lookup-min"))
      lookup_min = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--lookup-max"))
      lookup_max = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::max(1, std::atoi(argv[i + 1]));
    else {
      fmt::print(stderr,
                 "unknown flag {} (--model, --max-tokens, --k, --lookup-min, --lookup-max, "
                 "--repeats)\n",
                 argv[i]);
      return 2;
    }
  }
  if (kernels::cuda_device_count() == 0) {
    fmt::print("cuda_speculative_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  try {
    ModelBundle b = open_model_bundle(model_path, 1);
    kernels::CudaOptions o =
        kernels::cuda_options_for(mode_info(DeterminismMode::kInvariant).backend, 0);
    std::unique_ptr<kernels::Ops> ops = kernels::make_cuda_ops(o);
    LlamaModel model(b.model->config, b.model->weights, *ops);
    engine::SpeculativeConfig shown;  // the bounds the engine runs with (0: its default)
    shown.prompt_lookup_min = lookup_min;
    shown.prompt_lookup_max = lookup_max;
    shown = shown.with_defaults();
    fmt::print(
        "device: {}; batch 1, greedy, invariant, {} new tokens, K = {}, n-gram lookup "
        "{}..{}, best of {}\n",
        kernels::cuda_device_description(0), max_tokens, k, shown.prompt_lookup_min,
        shown.prompt_lookup_max, repeats);
    using engine::SpeculativeMethod;
    struct Run {
      Setup setup;
      GraphMode graphs;
    };
    const Run runs[] = {
        {{"plain, graphs"}, GraphMode::kAuto},
        {{"ngram, graphs", SpeculativeMethod::kNgram, false}, GraphMode::kAuto},
        {{"ngram adaptive, graphs", SpeculativeMethod::kNgram, true}, GraphMode::kAuto},
        {{"plain, eager"}, GraphMode::kOff},
        {{"ngram, eager", SpeculativeMethod::kNgram, false}, GraphMode::kOff}};
    constexpr int kRuns = static_cast<int>(std::size(runs));
    const std::vector<std::string> prompts = bench_util::speculative_prompts();
    const std::vector<std::string> names = bench_util::speculative_prompt_names();
    // One warm-up run (GEMM plans, graph captures of the buckets it uses).
    (void)run_one(model, nullptr, *b.tokenizer, prompts[0], 16, runs[1].setup, k, lookup_min,
                  lookup_max);
    for (size_t p = 0; p < prompts.size(); ++p) {
      Figures best[kRuns];
      for (int rep = 0; rep < repeats; ++rep) {
        for (int i = 0; i < kRuns; ++i) {
          Figures f = run_one(model, nullptr, *b.tokenizer, prompts[p], max_tokens, runs[i].setup,
                              k, lookup_min, lookup_max, runs[i].graphs);
          if (f.decode_tok_s > best[i].decode_tok_s) best[i] = std::move(f);
        }
      }
      fmt::print(
          "\n### {}\n\n| setup | decode tok/s | ÷ plain (graphs) | steps | drafts accepted "
          "| verify steps replayed | tokens identical |\n|---|---|---|---|---|---|---|\n",
          names[p]);
      for (int i = 0; i < kRuns; ++i) {
        const engine::EngineStats& st = best[i].stats;
        fmt::print("| {} | {:.1f} | {:.2f}× | {} | {} / {} | {} / {} | {} |\n", runs[i].setup.label,
                   best[i].decode_tok_s, best[i].decode_tok_s / best[0].decode_tok_s, st.n_steps,
                   st.n_accepted_draft_tokens, st.n_draft_tokens, st.n_window_row_steps_replayed,
                   st.n_window_row_steps, best[i].tokens == best[0].tokens ? "yes" : "NO");
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "cuda_speculative_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
