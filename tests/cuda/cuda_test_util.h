// Helpers of the GPU tests: skip without a GPU and the tests' CUDA backends. Device arrays and
// the paged KV world are the CPU tests' (kernels/kernel_test_util.h): they allocate through
// the Ops memory functions, so they run on the device unchanged.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "cuda/require_gpu.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/kernel_test_util.h"  // tests/kernels: shared with the CPU kernel tests
#include "kernels/ops.h"
#include "model/llama_weights.h"
#include "verify/conformance.h"

namespace detllm::kernels::cuda_testing {

// The CPU kernel tests' helpers, shared rather than copied.
using testing::AttnShape;
using testing::Chunk;
using testing::DeviceArray;
using testing::first_bit_difference;
using testing::random_floats;
using testing::round_bf16;
using testing::to_bf16;

// The weights with every matrix and the embedding rounded to bf16 (GGUF blocks decoded to fp32
// first, the values the CPU keeps): on them the CPU and the GPU start from the same numbers.
inline ModelWeights bf16_rounded_weights(ModelWeights w) {
  auto round_all = [](std::vector<float>& v) {
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  };
  dequantize_weights(w);
  round_all(w.tok_embd.data);
  round_all(w.lm_head.w.data);
  for (auto& l : w.layers) {
    for (auto* t : {&l.wq.w, &l.wk.w, &l.wv.w, &l.wo.w, &l.w_gate.w, &l.w_up.w, &l.w_down.w,
                    &l.router.w, &l.shared_expert.w_gate.w, &l.shared_expert.w_up.w,
                    &l.shared_expert.w_down.w, &l.shared_expert_gate.w})
      round_all(t->data);
    for (auto& e : l.experts)
      for (auto* t : {&e.w_gate.w, &e.w_up.w, &e.w_down.w}) round_all(t->data);
  }
  return w;
}

// Every logit row captured in both runs of the same n requests: expects max|a - b| <=
// tolerance · max|a| per row (a tolerance, not bits: CPU against GPU); returns the worst
// max|a - b| / max|a|.
inline float expect_logits_close(const conformance::RunResult& a, const conformance::RunResult& b,
                                 size_t n, float tolerance) {
  float worst = 0;
  for (size_t i = 0; i < n; ++i) {
    for (const auto& [key, la] : a.traces[i].logits) {
      const auto& lb = b.traces[i].logits.at(key);
      float max_abs = 0, max_diff = 0;
      for (size_t v = 0; v < la.size(); ++v) {
        max_abs = std::max(max_abs, std::fabs(la[v]));
        max_diff = std::max(max_diff, std::fabs(la[v] - lb[v]));
      }
      worst = std::max(worst, max_diff / max_abs);
      EXPECT_LE(max_diff, tolerance * max_abs) << "request " << i << " position " << key.second;
    }
  }
  return worst;
}

// The CUDA FP8 classes against the CPU's FP8 reference (or transformers' FP8 arithmetic), per
// logit row: max|Δ| <= kFp8LogitTolerance · max|logit|. A tolerance, stated: the GPU rounds
// each row to E4M3 from the bf16 GEMM inputs where the CPU rounds the fp32 ones, so a row's amax
// — its scale — moves by up to 2^-9 relative, and values all along the row cross E4M3
// midpoints (a step of 1/16 relative); with bf16 attention on top. Measured on an H100
// (2026-12-07, one step of 4 requests on the tiny models): worst 0.099 (tiny-qwen2 with 128×128
// weight blocks; 0.083 per channel), so the
// bf16 classes' 0.05 is too tight here. Compare rows whose inputs are the same tokens: one
// sampled step, or teacher-forced positions — a generated token that differs between the two
// sides makes every later row another question.
inline constexpr float kFp8LogitTolerance = 0.15f;

// DETLLM_SKIP_WITHOUT_GPU(): require_gpu.h (skips say why; DETLLM_REQUIRE_GPU=1 fails them).

// The KV dtype of the tests' CUDA backends: the backend's default (bf16), or fp32 when the
// environment says DETLLM_TEST_KV_DTYPE=fp32 (to run every GPU suite on the fp32 KV path).
inline DType test_kv_dtype() {
  const char* e = std::getenv("DETLLM_TEST_KV_DTYPE");
  if (e != nullptr && std::string_view(e) == "fp32") return DType::kF32;
  if (e != nullptr && std::string_view(e) != "bf16" && *e != 0)
    ADD_FAILURE() << "DETLLM_TEST_KV_DTYPE must be bf16 or fp32, not " << e;
  return CudaOptions{}.kv_dtype;
}

inline std::unique_ptr<Ops> invariant_ops(int attention_split_blocks = -1,
                                          DType kv_dtype = test_kv_dtype()) {
  CudaOptions o;
  o.attention_split_blocks = attention_split_blocks;
  o.kv_dtype = kv_dtype;
  return make_cuda_ops(o);
}

inline std::unique_ptr<Ops> fast_ops() {
  CudaOptions o;
  o.mode = NumericsMode::kFast;
  o.kv_dtype = test_kv_dtype();
  return make_cuda_ops(o);
}

// The same for large arrays (xorshift, ~1 ns a value): weights of 8B-model shapes.
inline std::vector<float> fast_random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                             float hi = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * static_cast<float>(s >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

// Whether device arrays a (n_words 32-bit words) and b differ anywhere, compared on the device
// (launch_any_word_differs; the launch on the legacy stream, then a device-wide synchronize).
inline bool differ_on_device(Ops& ops, const void* a, const void* b, int64_t n_words) {
  DeviceArray<uint32_t> flag(ops, 1);
  EXPECT_EQ(cuda::launch_any_word_differs(a, b, n_words, flag.data(), nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return flag.download()[0] != 0;
}

// The paged KV world runs on the device as on the host: its memory is the ops' memory.
using DevicePagedWorld = testing::PagedWorld;

}  // namespace detllm::kernels::cuda_testing
