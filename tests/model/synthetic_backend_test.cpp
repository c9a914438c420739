// Synthetic weights generated in backend memory (LlamaModel's recipe constructor through
// Ops::fill_uniform) against the host-generated ones: the host values are still those of the
// original generator (a frozen copy below), and the backend-generated tiny models give
// bit-identical logits on the ref and CPU backends, with fp32 weights and with bf16 weights
// (a CPU backend that asks for bf16, as the CUDA backend does). The GPU counterpart is
// tests/cuda/cuda_synthetic_test.cpp. Run: build/tests/test_model --gtest_filter='Synthetic*'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/synthetic_values.h"
#include "model/bf16_host_ops.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

// The generator as it was before recipes existed (frozen): the conformance suites' tiny models
// must keep these exact values.
namespace frozen {
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
class Gen {
 public:
  explicit Gen(uint64_t seed) : seed_(seed) {}
  std::vector<float> values(int64_t n, float center, float scale) {
    const uint64_t tensor = mix(seed_ ^ mix(++n_tensors_));
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = mix(tensor + static_cast<uint64_t>(i));
      const float u = static_cast<float>(r >> 40) * 0x1.0p-24f;
      v[static_cast<size_t>(i)] = center + scale * (2.0f * u - 1.0f);
    }
    return v;
  }
  std::vector<float> matrix(int64_t rows, int64_t cols) {
    return values(rows * cols, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  }

 private:
  uint64_t seed_;
  uint64_t n_tensors_ = 0;
};

// Every tensor of the old make_synthetic_weights, in its draw order, flattened.
std::vector<std::vector<float>> weights(const ModelConfig& c, uint64_t seed) {
  Gen g(seed);
  std::vector<std::vector<float>> t;
  t.push_back(g.values(int64_t{c.vocab_size} * c.dim, 0.0f, 0.3f));
  for (int32_t i = 0; i < c.n_layers; ++i) {
    t.push_back(g.values(c.dim, 1.0f, 0.2f));
    for (int64_t rows : {c.q_dim(), c.kv_dim(), c.kv_dim()}) {
      t.push_back(g.matrix(rows, c.dim));
      if (c.qkv_bias) t.push_back(g.values(rows, 0.0f, 0.1f));
    }
    t.push_back(g.matrix(c.dim, c.q_dim()));
    if (c.qk_norm) {
      t.push_back(g.values(c.head_dim, 1.0f, 0.2f));
      t.push_back(g.values(c.head_dim, 1.0f, 0.2f));
    }
    t.push_back(g.values(c.dim, 1.0f, 0.2f));
    t.push_back(g.matrix(c.ffn_dim, c.dim));
    t.push_back(g.matrix(c.ffn_dim, c.dim));
    t.push_back(g.matrix(c.dim, c.ffn_dim));
  }
  t.push_back(g.values(c.dim, 1.0f, 0.2f));
  if (!c.tied_embeddings) t.push_back(g.matrix(c.vocab_size, c.dim));
  return t;
}
}  // namespace frozen

std::vector<std::vector<float>> flatten(const ModelConfig& c, const ModelWeights& w) {
  std::vector<std::vector<float>> t;
  t.push_back(w.tok_embd.data);
  for (const LayerWeights& l : w.layers) {
    t.push_back(l.attn_norm);
    for (const Linear* lin : {&l.wq, &l.wk, &l.wv}) {
      t.push_back(lin->w.data);
      if (c.qkv_bias) t.push_back(lin->bias);
    }
    t.push_back(l.wo.w.data);
    if (c.qk_norm) {
      t.push_back(l.q_norm);
      t.push_back(l.k_norm);
    }
    t.push_back(l.ffn_norm);
    t.push_back(l.w_gate.w.data);
    t.push_back(l.w_up.w.data);
    t.push_back(l.w_down.w.data);
  }
  t.push_back(w.out_norm);
  if (!c.tied_embeddings) t.push_back(w.lm_head.w.data);
  return t;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using test_ops::Bf16HostOps;  // bf16 weights in "device" memory on the CPU (bf16_host_ops.h)

std::vector<int32_t> prompt(int32_t vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < 23; ++i) p.push_back((i * 37 + 11) % vocab);
  return p;
}

// All-position logits of a prompt, then three decode steps (greedy on the last logits).
std::vector<float> run(const LlamaModel& m) {
  SoloRunner r(m, 64, 4);
  std::vector<float> all = r.feed(prompt(m.config().vocab_size), /*all_logits=*/true);
  for (int step = 0; step < 3; ++step) {
    const size_t v = static_cast<size_t>(m.config().vocab_size);
    const float* last = all.data() + all.size() - v;
    int32_t best = 0;
    for (size_t i = 1; i < v; ++i) best = last[i] > last[best] ? static_cast<int32_t>(i) : best;
    const int32_t tok[1] = {best};
    const std::vector<float> l = r.feed(tok);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

const char* const kTiny[] = {"tiny-llama", "tiny-qwen2", "tiny-qwen3"};

TEST(Synthetic, HostValuesAreTheFrozenGenerator) {
  for (const char* name : kTiny) {
    const ModelConfig c = synthetic_config(name);
    for (uint64_t seed : {3, 42}) {
      const auto got = flatten(c, make_synthetic_weights(c, seed));
      const auto want = frozen::weights(c, seed);
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(same_bits(got[i], want[i])) << name << " seed " << seed << " tensor " << i;
    }
  }
}

TEST(Synthetic, RecipeMatchesHostWeights) {
  for (const char* name : kTiny) {
    const ModelConfig c = synthetic_config(name);
    const SyntheticWeights r = synthetic_recipe(c, 42);
    const ModelWeights w = make_synthetic_weights(c, 42);
    EXPECT_TRUE(same_bits(synthetic_values(r.tok_embd), w.tok_embd.data)) << name;
    EXPECT_TRUE(same_bits(synthetic_values(r.layers[1].w_down.w), w.layers[1].w_down.w.data));
    EXPECT_TRUE(same_bits(synthetic_values(r.layers[0].wq.bias), w.layers[0].wq.bias));
    EXPECT_EQ(r.lm_head.empty(), c.tied_embeddings) << name;
  }
}

// The 8B recipe: real shapes, every key distinct, 16 GB of bf16 matrices; and a slice of one
// of its tensors is the same tensor with its key moved (what the GPU test relies on).
TEST(Synthetic, Llama8bRecipe) {
  const ModelConfig c = synthetic_config("llama-3.1-8b");
  const SyntheticWeights r = synthetic_recipe(c, 7);
  ASSERT_EQ(r.layers.size(), 32u);
  EXPECT_EQ(r.lm_head.rows, 128256);
  EXPECT_EQ(r.layers[0].w_gate.w.rows, 14336);
  std::set<uint64_t> keys = {r.tok_embd.key, r.out_norm.key, r.lm_head.key};
  for (const SyntheticLayer& l : r.layers)
    for (const SyntheticTensor* t : {&l.attn_norm, &l.wq.w, &l.wk.w, &l.wv.w, &l.wo.w, &l.ffn_norm,
                                     &l.w_gate.w, &l.w_up.w, &l.w_down.w})
      keys.insert(t->key);
  EXPECT_EQ(keys.size(), 3u + 32u * 9u);
  const double gb = static_cast<double>(r.bytes(2)) / 1e9;
  EXPECT_GT(gb, 16.0);
  EXPECT_LT(gb, 16.1);
  const SyntheticTensor& down = r.layers[31].w_down.w;
  const uint64_t at = static_cast<uint64_t>(down.numel()) - 100;
  for (uint64_t i = 0; i < 100; ++i) {
    const float whole = kernels::synthetic_value(down.key, at + i, down.center, down.scale);
    const float slice = kernels::synthetic_value(down.key + at, i, down.center, down.scale);
    ASSERT_EQ(std::memcmp(&whole, &slice, 4), 0);
  }
}

// fill_uniform's host default equals synthetic_values (f32) and its bf16 rounding f32_to_bf16.
TEST(Synthetic, FillUniformHostDefault) {
  auto ops = kernels::make_ref_ops();
  const SyntheticTensor t{3, 1000, 0x1234567890abcdefull, 0.5f, 0.25f};
  const std::vector<float> want = synthetic_values(t);
  kernels::Buffer f(*ops, want.size() * 4), h(*ops, want.size() * 2);
  ops->fill_uniform(f.data(), DType::kF32, t.numel(), t.key, t.center, t.scale);
  ops->fill_uniform(h.data(), DType::kBF16, t.numel(), t.key, t.center, t.scale);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::memcmp(&f.f32()[i], &want[i], 4), 0) << i;
    ASSERT_EQ(h.data<uint16_t>()[i], f32_to_bf16(want[i])) << i;
  }
}

// The tiny models generated in backend memory give the very logits of the host-generated
// ones, on every host backend and weight dtype.
TEST(Synthetic, BackendGeneratedModelsGiveIdenticalLogits) {
  for (const char* name : kTiny) {
    const ModelConfig c = synthetic_config(name);
    const ModelWeights host = make_synthetic_weights(c, 42);
    const SyntheticWeights recipe = synthetic_recipe(c, 42);
    std::vector<std::pair<std::string, std::unique_ptr<kernels::Ops>>> backends;
    backends.emplace_back("ref", kernels::make_ref_ops());
    backends.emplace_back("cpu", kernels::make_cpu_ops(2));
    backends.emplace_back("cpu-bf16", std::make_unique<Bf16HostOps>(kernels::make_cpu_ops(2)));
    for (auto& [label, ops] : backends) {
      const std::vector<float> want = run(LlamaModel(c, host, *ops));
      const std::vector<float> got = run(LlamaModel(c, recipe, *ops));
      ASSERT_FALSE(want.empty());
      EXPECT_TRUE(same_bits(got, want)) << name << " on " << label;
    }
  }
}

// The mixture-of-experts tiny model built from its recipe (router rows repeated from the
// recipe's distinct ones by Ops::copy, each expert's gate and up generated fused) gives the
// logits of the host weights (router expanded on the host, experts apart).
TEST(Synthetic, MoeRecipeGivesTheHostWeightsLogits) {
  const ModelConfig c = synthetic_config("tiny-qwen3-moe");
  const ModelWeights host = make_synthetic_weights(c, 42);
  const SyntheticWeights recipe = synthetic_recipe(c, 42);
  ASSERT_EQ(recipe.layers[0].router.rows, kSyntheticRouterPeriod);
  std::vector<std::unique_ptr<kernels::Ops>> backends;
  backends.push_back(kernels::make_ref_ops());
  backends.push_back(kernels::make_cpu_ops(2));
  for (const auto& ops : backends) {
    const std::vector<float> want = run(LlamaModel(c, host, *ops));
    const std::vector<float> got = run(LlamaModel(c, recipe, *ops));
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(same_bits(got, want)) << ops->name();
  }
  // The benchmark shapes' routers have a distinct row per expert.
  EXPECT_EQ(synthetic_router_rows(synthetic_config("qwen3-30b-a3b")), 128);
  EXPECT_EQ(synthetic_router_rows(synthetic_config("olmoe-1b-7b")), 64);
}

TEST(Synthetic, RecipeForAnotherConfigIsRefused) {
  auto ops = kernels::make_ref_ops();
  const SyntheticWeights r = synthetic_recipe(synthetic_config("tiny-llama"), 1);
  EXPECT_THROW({ LlamaModel m(synthetic_config("tiny-qwen3"), r, *ops); }, Error);
  EXPECT_THROW({ LlamaModel m(synthetic_config("tiny-qwen2"), r, *ops); }, Error);
}

}  // namespace
}  // namespace detllm
