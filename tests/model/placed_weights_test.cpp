// LlamaModel::placed (the in-place weight update of device backends, api/llm_session.cpp):
// every parameter's placed tensor, written with another model's values, makes the model compute
// exactly as a model built from those values — for each tiny family (GQA + tied embeddings,
// qkv biases, q/k norms) and both projection layouts (fused [q | k | v] / [gate | up] rows, or
// kept apart). Runs on the CPU with bf16 weights in "device" memory (bf16_host_ops.h), so the
// row offsets inside fused matrices and biases are checked where no GPU is.
// Run: build/tests/test_model --gtest_filter='PlacedWeights*'.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/bf16_host_ops.h"
#include "model/llama_model.h"
#include "model/solo_runner.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

using P = LlamaModel::Param;

struct Source {
  P param;
  int32_t layer;
  const std::vector<float>* values;  // host fp32
};

// Every parameter of w with its LlamaModel::Param (the api's HF-name table in small).
std::vector<Source> sources(const ModelConfig& c, const ModelWeights& w) {
  std::vector<Source> out = {{P::kTokEmbd, 0, &w.tok_embd.data}, {P::kOutNorm, 0, &w.out_norm}};
  if (!c.tied_embeddings) out.push_back({P::kLmHead, 0, &w.lm_head.w.data});
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = w.layers.at(static_cast<size_t>(i));
    for (const Source& s : std::vector<Source>{
             {P::kAttnNorm, i, &l.attn_norm}, {P::kWq, i, &l.wq.w.data}, {P::kWk, i, &l.wk.w.data},
             {P::kWv, i, &l.wv.w.data}, {P::kWo, i, &l.wo.w.data}, {P::kFfnNorm, i, &l.ffn_norm},
             {P::kGate, i, &l.w_gate.w.data}, {P::kUp, i, &l.w_up.w.data},
             {P::kDown, i, &l.w_down.w.data}})
      out.push_back(s);
    if (c.qkv_bias) {
      out.push_back({P::kBq, i, &l.wq.bias});
      out.push_back({P::kBk, i, &l.wk.bias});
      out.push_back({P::kBv, i, &l.wv.bias});
    }
    if (c.qk_norm) {
      out.push_back({P::kQNorm, i, &l.q_norm});
      out.push_back({P::kKNorm, i, &l.k_norm});
    }
  }
  return out;
}

// Writes host fp32 values into a placed tensor, rounded to its dtype as the load rounds.
void write(kernels::Ops& ops, const LlamaModel::PlacedTensor& dst, const std::vector<float>& v) {
  ASSERT_NE(dst.data, nullptr);
  ASSERT_EQ(dst.numel, static_cast<int64_t>(v.size()));
  if (dst.dtype == DType::kF32) {
    ops.upload(dst.data, v.data(), v.size() * sizeof(float));
    return;
  }
  ASSERT_EQ(dst.dtype, DType::kBF16);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  ops.upload(dst.data, h.data(), h.size() * sizeof(uint16_t));
}

// All-position logits of a fixed prompt, then two decode steps.
std::vector<float> logits(const LlamaModel& m) {
  SoloRunner r(m, 48, 4);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back((i * 29 + 5) % m.config().vocab_size);
  std::vector<float> all = r.feed(prompt, /*all_logits=*/true);
  for (int32_t t : {3, 11}) {
    const int32_t tok[1] = {t};
    const std::vector<float> l = r.feed(tok);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PlacedWeights, WritingEveryParameterGivesTheOtherModelsBits) {
  for (const char* name : {"tiny-llama", "tiny-qwen2", "tiny-qwen3"}) {
    const ModelConfig c = synthetic_config(name);
    const ModelWeights w0 = make_synthetic_weights(c, 3);
    const ModelWeights w1 = make_synthetic_weights(c, 4);
    for (ProjectionLayout layout : {ProjectionLayout::kFused, ProjectionLayout::kSeparate}) {
      test_ops::Bf16HostOps ops(kernels::make_cpu_ops(2));
      LlamaModel a(c, w0, ops, layout);
      const LlamaModel b(c, w1, ops, layout);
      const std::vector<float> before = logits(a), want = logits(b);
      ASSERT_FALSE(same_bits(before, want)) << name;
      for (const Source& s : sources(c, w1)) {
        ASSERT_NO_FATAL_FAILURE(write(ops, a.placed(s.param, s.layer), *s.values))
            << name << " param " << static_cast<int>(s.param) << " layer " << s.layer;
      }
      EXPECT_TRUE(same_bits(logits(a), want)) << name << " layout " << static_cast<int>(layout);
    }
  }
}

TEST(PlacedWeights, ShapesAliasesAndAbsentParameters) {
  const ModelConfig c = synthetic_config("tiny-llama");  // tied, no biases, no q/k norms
  const ModelWeights w = make_synthetic_weights(c, 3);
  test_ops::Bf16HostOps ops(kernels::make_cpu_ops(2));
  const LlamaModel m(c, w, ops, ProjectionLayout::kFused);
  EXPECT_EQ(m.placed(P::kLmHead).data, m.placed(P::kTokEmbd).data);  // tied: one tensor
  EXPECT_EQ(m.placed(P::kWk, 1).numel, int64_t{c.n_kv_heads} * c.head_dim * c.dim);
  EXPECT_EQ(m.placed(P::kWk, 1).dtype, DType::kBF16);
  EXPECT_EQ(m.placed(P::kFfnNorm, 1).dtype, DType::kF32);
  // fused: k's rows follow q's, v's follow k's; up's follow gate's
  const auto* q = static_cast<const char*>(m.placed(P::kWq, 0).data);
  EXPECT_EQ(static_cast<const char*>(m.placed(P::kWk, 0).data), q + m.placed(P::kWq, 0).numel * 2);
  const auto* gate = static_cast<const char*>(m.placed(P::kGate, 0).data);
  EXPECT_EQ(static_cast<const char*>(m.placed(P::kUp, 0).data), gate + m.placed(P::kGate, 0).numel * 2);
  EXPECT_EQ(m.placed(P::kBq, 0).data, nullptr);
  EXPECT_EQ(m.placed(P::kQNorm, 0).data, nullptr);
  EXPECT_THROW(m.placed(P::kWq, c.n_layers), Error);
  // a host backend computes on the caller's weights in place: nothing is "placed"
  auto cpu = kernels::make_cpu_ops(2);
  const LlamaModel h(c, w, *cpu);
  EXPECT_THROW(h.placed(P::kWq, 0), Error);
}

}  // namespace
}  // namespace detllm
