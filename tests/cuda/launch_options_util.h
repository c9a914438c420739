// For the tests of options that promise the same bits (programmatic
// dependent launch): one fixed run of decode steps under a given CudaOptions, whose logits the
// caller compares bit for bit across options.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_ops.h"
#include "model/decode_steps_util.h"
#include "model/llama_model.h"

namespace detllm::kernels::cuda_testing {

// Prompts of 3–38 tokens for 8 sequences (blocks of 4), then decode steps of 1–8 rows, each run
// eagerly and padded from a CUDA graph (EagerVsPadded checks those two against each other, as
// gtest failures); returns the decode steps' logits, all steps concatenated (empty on a
// failure). prompt_scale lengthens the prompts (contexts past one attention split).
inline std::vector<float> decode_logits(const ModelConfig& cfg, const ModelWeights& w,
                                        const CudaOptions& o, const std::string& what,
                                        int32_t prompt_scale = 1) {
  auto ops = make_cuda_ops(o);
  LlamaModel model(cfg, w, *ops);
  const int32_t bs = 4, n_seqs = 8;
  detllm::testing::DecodeWorld world(n_seqs, 200 * prompt_scale, bs, cfg.vocab_size, 13);
  detllm::testing::EagerVsPadded check(model, world, bs);
  std::vector<float> all;
  for (int32_t s = 0; s < n_seqs; ++s)
    check.run(world.step({s}, (3 + 5 * s) * prompt_scale), what + " prompt");
  for (const int32_t k : {1, 3, 8, 2, 5, 1, 7, 4}) {
    const std::vector<float> l = check.run(world.step(world.pick(k)), what + " decode");
    all.insert(all.end(), l.begin(), l.end());
  }
  if (::testing::Test::HasFailure()) return {};
  EXPECT_GT(model.step_stats().n_graph_replays, 0) << what;
  return all;
}

}  // namespace detllm::kernels::cuda_testing
