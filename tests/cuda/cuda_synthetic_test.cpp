// Synthetic weights generated on the GPU (Ops::fill_uniform, src/kernels/cuda/synthetic.cu)
// equal the host generator bit for bit: fp32 and bf16 fills against kernels::synthetic_value
// and f32_to_bf16; every tensor of tiny-llama; slices of Llama-3.1-8B's lm_head and of a tensor
// past 2^31 elements (64-bit indexing); and a tiny model generated on the GPU gives the very
// logits of the host-generated one uploaded (invariant mode). Skips without a GPU.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaSynthetic*'.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/synthetic_values.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm::kernels::cuda_testing {
namespace {

// Host values of t[first, first + n), in the dtype the device was asked for (as raw bits).
std::vector<uint16_t> host_bf16(const SyntheticTensor& t, uint64_t first, size_t n) {
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i)
    h[i] = f32_to_bf16(synthetic_value(t.key, first + i, t.center, t.scale));
  return h;
}
std::vector<float> host_f32(const SyntheticTensor& t, uint64_t first, size_t n) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = synthetic_value(t.key, first + i, t.center, t.scale);
  return h;
}

template <typename T>
::testing::AssertionResult same_bits(const std::vector<T>& got, const std::vector<T>& want,
                                     const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0)
      return ::testing::AssertionFailure() << what << ": element " << i << " differs";
  }
  return ::testing::AssertionSuccess();
}

// Every tensor of a recipe, with whether it is a matrix (stored in the weight dtype).
void for_each_tensor(const SyntheticWeights& r,
                     const std::function<void(const SyntheticTensor&, bool)>& f) {
  auto lin = [&](const SyntheticLinear& l) {
    f(l.w, true);
    if (!l.bias.empty()) f(l.bias, false);
  };
  f(r.tok_embd, true);
  for (const SyntheticLayer& l : r.layers) {
    f(l.attn_norm, false);
    lin(l.wq);
    lin(l.wk);
    lin(l.wv);
    lin(l.wo);
    if (!l.q_norm.empty()) f(l.q_norm, false);
    if (!l.k_norm.empty()) f(l.k_norm, false);
    f(l.ffn_norm, false);
    lin(l.w_gate);
    lin(l.w_up);
    lin(l.w_down);
  }
  f(r.out_norm, false);
  if (!r.lm_head.empty()) f(r.lm_head, true);
}

TEST(CudaSynthetic, FillMatchesHostF32AndBf16) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const SyntheticTensor cases[] = {{1, 1, 1, 0.0f, 1.0f},
                                   {37, 129, 0xdeadbeefcafef00dull, 1.0f, 0.2f},
                                   {1000, 1001, ~0ull - 5000, 0.0f, 0.015625f},
                                   {3, 7777, 42, -0.3f, 0.1f}};
  for (const SyntheticTensor& t : cases) {
    const size_t n = static_cast<size_t>(t.numel());
    DeviceArray<float> f(*ops, n);
    DeviceArray<uint16_t> h(*ops, n);
    ops->fill_uniform(f.data(), DType::kF32, t.numel(), t.key, t.center, t.scale);
    ops->fill_uniform(h.data(), DType::kBF16, t.numel(), t.key, t.center, t.scale);
    EXPECT_TRUE(same_bits(f.download(), host_f32(t, 0, n), "f32 n=" + std::to_string(n)));
    EXPECT_TRUE(same_bits(h.download(), host_bf16(t, 0, n), "bf16 n=" + std::to_string(n)));
  }
}

// Every tensor of tiny-llama (and the other tiny models) as the GPU makes it, against the
// host-generated weights rounded the way LlamaModel uploads them.
TEST(CudaSynthetic, TinyModelsWhole) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const SyntheticWeights r = synthetic_recipe(synthetic_config(name), 42);
    int i = 0;
    for_each_tensor(r, [&](const SyntheticTensor& t, bool matrix) {
      const size_t n = static_cast<size_t>(t.numel());
      const std::string what = std::string(name) + " tensor " + std::to_string(i++);
      if (matrix) {
        DeviceArray<uint16_t> d(*ops, n);
        ops->fill_uniform(d.data(), DType::kBF16, t.numel(), t.key, t.center, t.scale);
        EXPECT_TRUE(same_bits(d.download(), to_bf16(synthetic_values(t)), what));
      } else {
        DeviceArray<float> d(*ops, n);
        ops->fill_uniform(d.data(), DType::kF32, t.numel(), t.key, t.center, t.scale);
        EXPECT_TRUE(same_bits(d.download(), synthetic_values(t), what));
      }
    });
  }
}

// Llama-3.1-8B's lm_head (128256 × 4096 bf16, 1 GiB) made whole on the GPU: slices at the
// start, the middle and the end equal the host's values at those indices.
TEST(CudaSynthetic, Llama8bLmHeadSlices) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const SyntheticWeights r = synthetic_recipe(synthetic_config("llama-3.1-8b"), 7);
  const SyntheticTensor& t = r.lm_head;
  const size_t n = static_cast<size_t>(t.numel());
  Buffer d(*ops, n * 2);
  ops->fill_uniform(d.data(), DType::kBF16, t.numel(), t.key, t.center, t.scale);
  const size_t slice = 1 << 16;
  for (size_t first : {size_t{0}, n / 2 + 12345, n - slice}) {
    std::vector<uint16_t> got(slice);
    ops->download(got.data(), d.data<uint16_t>() + first, slice * 2);
    EXPECT_TRUE(same_bits(got, host_bf16(t, first, slice), "lm_head at " + std::to_string(first)));
  }
}

// A tensor past 2^31 elements (4 GiB of bf16): indices above 2^31 use the 64-bit counter.
TEST(CudaSynthetic, PastTwoToTheThirtyOne) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const SyntheticTensor t{(int64_t{1} << 31) + 4097, 1, 0x0123456789abcdefull, 0.0f, 0.02f};
  const size_t n = static_cast<size_t>(t.numel());
  Buffer d(*ops, n * 2);
  ops->fill_uniform(d.data(), DType::kBF16, t.numel(), t.key, t.center, t.scale);
  const size_t slice = 8192;
  for (size_t first : {(size_t{1} << 31) - 4096, n - slice}) {
    std::vector<uint16_t> got(slice);
    ops->download(got.data(), d.data<uint16_t>() + first, slice * 2);
    EXPECT_TRUE(same_bits(got, host_bf16(t, first, slice), "at " + std::to_string(first)));
  }
}

// A tiny model generated on the GPU runs to the same logits as the host-generated one uploaded.
TEST(CudaSynthetic, GeneratedModelGivesUploadedModelsLogits) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const ModelConfig c = synthetic_config(name);
    const ModelWeights host = make_synthetic_weights(c, 42);
    const LlamaModel uploaded(c, host, *ops);
    const LlamaModel generated(c, synthetic_recipe(c, 42), *ops);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 29; ++i) prompt.push_back((i * 53 + 5) % c.vocab_size);
    SoloRunner a(uploaded, 64, 16), b(generated, 64, 16);
    const std::vector<float> want = a.feed(prompt, /*all_logits=*/true);
    const std::vector<float> got = b.feed(prompt, /*all_logits=*/true);
    EXPECT_TRUE(same_bits(got, want, name));
  }
}

}  // namespace
}  // namespace detllm::kernels::cuda_testing
