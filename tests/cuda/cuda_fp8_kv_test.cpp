// The FP8 KV cache on the CUDA backend (--kv-dtype fp8, docs/cuda.md "FP8 on the model"): E4M3
// codes with the model's per-(layer, KV head) scales, appended once by the fused q/k/v kernel,
// read by the packed CTA as bf16(dec(code) · scale) into its tiles. Checked: attention over an
// FP8 cache = the bf16 attention (packed CTA forced, and the planner's own choice of kernel)
// over a bf16 cache holding exactly those values, bit for bit, on prefill and decode steps and
// three head geometries (so the reduction order is the bf16 cache's); the scales are really read
// (other scales, other bits); a model with FP8 KV within kFp8LogitTolerance · max|logit| of the CPU's FP8 KV
// reference (a tolerance: bf16 attention inputs against fp32; bf16-rounded or FP8 weights on
// both sides); and the negative control — K/V
// scales taken from the call's own tokens instead of fixed at load — FAILS V1 where the fixed
// scales hold it; the startup self-check (its random K/V come without scales: 1 a head) passes on
// an FP8-KV backend. The conformance suite runs on "tiny-llama@fp8+kvfp8" and "tiny-qwen3+kvfp8"
// (cuda_conformance_test.cpp). Run: build-cuda/tests/test_cuda --gtest_filter='CudaFp8Kv*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "cuda/cuda_test_util.h"
#include "cuda/forwarding_ops.h"
#include "kernels/attention_plan.h"
#include "model/fp8_weights.h"
#include "model/synthetic.h"
#include "verify/guarantee_matrix.h"
#include "verify/self_check.h"

namespace detllm::conformance {
namespace {

using kernels::cuda_testing::DeviceArray;

struct KvCase {
  int32_t n_heads, n_kv_heads, head_dim, block_size, positions;
};

std::unique_ptr<kernels::Ops> cuda_ops(DType kv, int attention_kernel = -1) {
  kernels::CudaOptions o;
  o.kv_dtype = kv;
  o.attention_kernel = attention_kernel;
  return kernels::make_cuda_ops(o);
}

TEST(CudaFp8Kv, AttentionOnCodesIsBf16AttentionOnTheirValues) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops8 = cuda_ops(DType::kF8E4M3);
  // The decode warps forced (where they apply: decode steps; the packed CTA elsewhere): their
  // rings dequantize in place (attention_tc_decode_warp.cuh), the transposed warp for n_rep ≤ 8
  // and the row-layout one above.
  auto warps8 = cuda_ops(DType::kF8E4M3, static_cast<int>(kernels::AttentionKernel::kDecodeWarps));
  auto packed = cuda_ops(DType::kBF16, static_cast<int>(kernels::AttentionKernel::kPacked));
  auto chosen = cuda_ops(DType::kBF16);
  for (const KvCase& c : {KvCase{32, 8, 128, 16, 600}, KvCase{9, 3, 64, 16, 300},
                          KvCase{4, 2, 16, 4, 77}, KvCase{32, 2, 128, 16, 333},
                          KvCase{24, 2, 64, 16, 1100}}) {
    SCOPED_TRACE(::testing::Message() << c.n_heads << "/" << c.n_kv_heads << "x" << c.head_dim);
    const int32_t n_blocks = (c.positions + c.block_size - 1) / c.block_size;
    const size_t n = static_cast<size_t>(n_blocks) * c.block_size * c.n_kv_heads * c.head_dim;
    std::mt19937 rng(static_cast<uint32_t>(c.head_dim * 131 + c.positions));
    std::vector<uint8_t> kc(n), vc(n);
    for (auto* codes : {&kc, &vc})
      for (uint8_t& b : *codes) {
        b = static_cast<uint8_t>(rng() & 0xffu);
        if ((b & 0x7fu) == 0x7fu) b ^= 1u;  // no NaN codes (the append never makes one)
      }
    std::vector<float> ks(static_cast<size_t>(c.n_kv_heads)), vs(ks.size());
    for (int32_t h = 0; h < c.n_kv_heads; ++h) {
      ks[static_cast<size_t>(h)] = 0.0037f * static_cast<float>(h + 1);
      vs[static_cast<size_t>(h)] = 0.0061f * static_cast<float>(h + 2);
    }
    // The bf16 cache of the values the FP8 load makes: bf16(dec(code) · scale), one fp32 product.
    std::vector<uint16_t> kb(n), vb(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t h = (i / static_cast<size_t>(c.head_dim)) % static_cast<size_t>(c.n_kv_heads);
      kb[i] = f32_to_bf16(fp8_e4m3_to_float(kc[i]) * ks[h]);
      vb[i] = f32_to_bf16(fp8_e4m3_to_float(vc[i]) * vs[h]);
    }
    DeviceArray<uint8_t> dkc(*ops8, kc), dvc(*ops8, vc);
    DeviceArray<uint16_t> dkb(*ops8, kb), dvb(*ops8, vb);
    DeviceArray<float> dks(*ops8, ks), dvs(*ops8, vs);
    std::vector<float> ks2 = ks;
    for (float& s : ks2) s *= 1.5f;
    DeviceArray<float> dks2(*ops8, ks2);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int32_t b = 0; b < n_blocks; ++b) table[static_cast<size_t>(b)] = n_blocks - 1 - b;
    DeviceArray<int32_t> dtable(*ops8, table);
    kernels::KvCacheLayer fp8{dkc.data(), dvc.data(), n_blocks, c.block_size, c.n_kv_heads,
                              c.head_dim, DType::kF8E4M3, dks.data(), dvs.data()};
    kernels::KvCacheLayer bf16{dkb.data(), dvb.data(), n_blocks, c.block_size, c.n_kv_heads,
                               c.head_dim, DType::kBF16, nullptr, nullptr};
    // Prefill (every position at once) and a decode step (the last position alone).
    for (int32_t first : {0, c.positions - 1}) {
      const int32_t t = c.positions - first;
      std::vector<int32_t> pos(static_cast<size_t>(t)), seq(pos.size(), 0);
      for (int32_t i = 0; i < t; ++i) pos[static_cast<size_t>(i)] = first + i;
      DeviceArray<int32_t> dpos(*ops8, pos), dseq(*ops8, seq);
      const std::vector<float> q = kernels::cuda_testing::random_floats(
          static_cast<size_t>(t) * c.n_heads * c.head_dim, static_cast<uint32_t>(t), -4, 4);
      DeviceArray<float> dq(*ops8, q);
      kernels::StepBatch batch{t, dpos.data(), dseq.data(), dpos.data(), 1, n_blocks,
                               dtable.data()};
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      const size_t outs = q.size();
      DeviceArray<float> o8(*ops8, outs), op(*packed, outs), oc(*chosen, outs), o2(*ops8, outs),
          ow(*ops8, outs);
      ops8->attention(dq.data(), fp8, batch, c.n_heads, scale, o8.data());
      warps8->attention(dq.data(), fp8, batch, c.n_heads, scale, ow.data());
      warps8->synchronize();
      packed->attention(dq.data(), bf16, batch, c.n_heads, scale, op.data());
      chosen->attention(dq.data(), bf16, batch, c.n_heads, scale, oc.data());
      kernels::KvCacheLayer other = fp8;
      other.k_scale = dks2.data();
      ops8->attention(dq.data(), other, batch, c.n_heads, scale, o2.data());
      const auto a = o8.download(), b = op.download(), d = oc.download(), e = o2.download();
      const auto w = ow.download();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), outs * 4), 0) << "first " << first << " (packed)";
      EXPECT_EQ(std::memcmp(w.data(), b.data(), outs * 4), 0) << "first " << first << " (warps)";
      EXPECT_EQ(std::memcmp(a.data(), d.data(), outs * 4), 0) << "first " << first << " (chosen)";
      EXPECT_NE(std::memcmp(a.data(), e.data(), outs * 4), 0) << "the K scales were not read";
      EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
    }
  }
}

struct Fp8KvModel {
  Fp8KvModel(const char* model, bool fp8_weights) : name(model), config(synthetic_config(model)) {
    weights = make_synthetic_weights(config, 42);
    // FP8 projections, or weights rounded to bf16 (the values both backends then start from).
    if (fp8_weights)
      quantize_weights_fp8(weights, config);
    else
      weights = kernels::cuda_testing::bf16_rounded_weights(std::move(weights));
  }
  Target target(std::function<std::unique_ptr<kernels::Ops>(int)> make_ops) const {
    Target t;
    t.name = name + "+kvfp8";
    t.config = &config;
    t.weights = &weights;
    t.make_ops = std::move(make_ops);
    return t;
  }
  std::string name;
  ModelConfig config;
  ModelWeights weights;
};

TEST(CudaFp8Kv, ModelsAreCloseToTheCpuFp8KvReference) {
  DETLLM_SKIP_WITHOUT_GPU();
  for (auto [name, fp8_weights] : {std::pair<const char*, bool>{"tiny-llama", true},
                                   {"tiny-qwen3", false}, {"tiny-qwen2", false}}) {
    const Fp8KvModel m(name, fp8_weights);
    WorkloadSpec s;
    s.n_requests = 4;
    s.vocab_size = m.config.vocab_size;
    s.scoring_share = 0;
    s.max_new_tokens = 1;  // one sampled step: both sides' rows have the same inputs
    auto reqs = random_workload(12, s);
    for (auto& r : reqs) r.n = 1;
    const RunResult cpu = run(m.target([](int n) {
                                return kernels::make_cpu_ops(n, CpuActivations::kF32, true);
                              }),
                              base_execution("cpu"), reqs);
    const RunResult gpu = run(m.target([](int) { return cuda_ops(DType::kF8E4M3); }),
                              base_execution("gpu"), reqs);
    const float worst = kernels::cuda_testing::expect_logits_close(cpu, gpu, reqs.size(),
                                                                   kernels::cuda_testing::kFp8LogitTolerance);
    std::printf("[fp8] %s%s+kvfp8: CUDA vs CPU FP8 KV logits, worst ratio %.3g\n", name,
                fp8_weights ? "@fp8" : "", worst);
  }
}

// K/V scales from the call's own tokens (max |k|, |v| of each KV head over the call / 448)
// instead of the ones fixed at load: a token's codes depend on what was appended with it.
class Fp8KvLiveScaleCudaOps final : public kernels::cuda_testing::ForwardingOps {
 public:
  Fp8KvLiveScaleCudaOps() : ForwardingOps(cuda_ops(DType::kF8E4M3), "fault:cuda-fp8-kv-live-scale") {}
  kernels::GraphCapture* graph_capture() override { return nullptr; }
  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const kernels::RopeTable& table,
                       const kernels::StepBatch& batch, const kernels::KvCacheLayer& cache,
                       float* q_out) override {
    const int32_t kv = cache.n_kv_heads, hd = cache.head_dim;
    const size_t width = static_cast<size_t>(n_heads + 2 * kv) * hd;
    std::vector<float> rows(static_cast<size_t>(n) * width);
    inner_->download(rows.data(), qkv, rows.size() * sizeof(float));
    std::vector<float> s(static_cast<size_t>(2 * kv), 0.0f);
    for (int32_t t = 0; t < n; ++t)
      for (int32_t h = 0; h < 2 * kv; ++h)
        for (int32_t d = 0; d < hd; ++d)
          s[static_cast<size_t>(h)] = std::max(
              s[static_cast<size_t>(h)],
              std::fabs(rows[t * width + static_cast<size_t>(n_heads + h) * hd + d]));
    for (float& x : s) x = x == 0.0f ? 1.0f : x / kFp8E4m3Max;
    if (live_.size_bytes() < s.size() * sizeof(float))
      live_ = kernels::Buffer(*inner_, s.size() * sizeof(float));
    inner_->upload(live_.data(), s.data(), s.size() * sizeof(float));
    kernels::KvCacheLayer c = cache;
    c.k_scale = live_.f32();
    c.v_scale = live_.f32() + kv;
    inner_->qkv_rope_append(qkv, n, n_heads, q_norm, k_norm, eps, table, batch, c, q_out);
    inner_->synchronize();  // live_ is rewritten by the next layer's call
  }

 private:
  kernels::Buffer live_;
};

TEST(CudaFp8Kv, LiveScalesFailV1AndFixedScalesHoldIt) {
  DETLLM_SKIP_WITHOUT_GPU();
  const Fp8KvModel m("tiny-llama", false);
  VariationSpec s;
  s.vocab_size = m.config.vocab_size;
  s.n_requests = 4;
  s.max_prompt = 20;
  s.max_new_tokens = 6;
  for (const Variation& v : build_variations(s)) {
    if (v.id != "V1") continue;
    const CellResult bad = run_variation(
        m.target([](int) { return std::make_unique<Fp8KvLiveScaleCudaOps>(); }),
        DeterminismMode::kInvariant, v);
    std::printf("[fp8] cuda-fp8-kv-live-scale x V1: %s\n", bad.text().c_str());
    EXPECT_EQ(bad.state, CellResult::State::kFails) << bad.text();
    const CellResult ok = run_variation(m.target([](int) { return cuda_ops(DType::kF8E4M3); }),
                                        DeterminismMode::kInvariant, v);
    EXPECT_EQ(ok.state, CellResult::State::kHolds) << ok.text();
  }
}

TEST(CudaFp8Kv, TheStartupSelfCheckPasses) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = cuda_ops(DType::kF8E4M3);
  const SelfCheckReport r =
      run_self_check(*ops, self_check_options_for(synthetic_config("tiny-llama")));
  EXPECT_TRUE(r.passed()) << r.describe();
}

}  // namespace
}  // namespace detllm::conformance
