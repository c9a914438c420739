// Fused and separate q/k/v and gate/up weights (LlamaModel's ProjectionLayout) give the same
// logits, bit for bit: every output element of a projection keeps its own K order whichever
// layout holds the weights. Backend-generic: tests/model/projection_layout_test.cpp (ref, cpu),
// tests/cuda/cuda_fused_ops_test.cpp (the GPU, where kAuto fuses).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/decode_steps_util.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"

namespace detllm::testing {

// Prefill chunks and decode steps over a few sequences, each step run on both models (each with
// its own KV storage); every logit must be the same bits.
inline void expect_same_logits(const LlamaModel& a, const LlamaModel& b, const std::string& what) {
  ASSERT_NE(a.projection_layout(), b.projection_layout()) << what << ": compare two layouts";
  constexpr int32_t kBlock = 16;
  DecodeWorld world(3, 96, kBlock, a.config().vocab_size, 7);
  KvStorage kv_a(a.ops(), a.config(), world.n_blocks(), kBlock);
  KvStorage kv_b(b.ops(), b.config(), world.n_blocks(), kBlock);
  std::vector<TestStep> steps;
  steps.push_back(world.step({0, 1, 2}, 9));   // prefill
  steps.push_back(world.step({2, 0}, 5));      // a chunk
  for (int i = 0; i < 4; ++i) steps.push_back(world.step(world.pick(2)));  // decode
  steps.push_back(world.step({1, 0, 2}));
  int n = 0;
  for (const TestStep& st : steps) {
    std::vector<float> la, lb;
    a.forward(st.tokens, st.batch(), st.logit_rows, kv_a, la, GraphMode::kOff);
    b.forward(st.tokens, st.batch(), st.logit_rows, kv_b, lb, GraphMode::kOff);
    ASSERT_EQ(la.size(), lb.size());
    for (size_t i = 0; i < la.size(); ++i) {
      if (std::memcmp(&la[i], &lb[i], sizeof(float)) != 0) {
        ADD_FAILURE() << what << ", step " << n << ": logit " << i << " differs: " << la[i]
                      << " vs " << lb[i];
        return;
      }
    }
    ++n;
  }
}

}  // namespace detllm::testing
