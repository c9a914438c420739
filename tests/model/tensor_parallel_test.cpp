// Tensor parallelism invariant across degrees (model/tensor_parallel.h; issue 17), on the CPU
// with ranks as threads: the same steps — a mixed prefill of several prompts on shuffled pages,
// then decode steps over shuffled subsets of the sequences — run at TP 1, 2 (and 4 where the
// model has 4 KV heads), each rank with its own ops, sharded weights and KV storage. Every
// logit bit of every step equals TP 1's, on every rank; TP 1 with the canonical chunks stays
// within a stated tolerance of the one-device model; and the naive partition (one K chunk per
// rank, so the chunking follows the degree) is caught differing — the check can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "conformance/delegating_ops.h"
#include "core/error.h"
#include "core/quant.h"
#include "formats/dequant.h"
#include "kernels/ops.h"
#include "model/decode_steps_util.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/synthetic.h"
#include "model/tensor_parallel.h"
#include "model/tp_group.h"
#include "model/tp_test_util.h"

namespace detllm {
namespace {

using testing::DecodeWorld;
using testing::default_model;
using testing::default_model_tp_logits;
using testing::first_difference;
using testing::kBlock;
using testing::make_steps;
using testing::TestStep;
using testing::tp4_config;

// The shared runner (tp_test_util.h) with CPU ranks of one thread each.
std::vector<std::vector<float>> run_tp(const ModelConfig& c, const ModelWeights& w, int32_t degree,
                                       TpChunks chunks, const std::vector<TestStep>& steps,
                                       int32_t n_blocks) {
  return testing::run_tp(c, w, degree, chunks, steps, n_blocks,
                         [] { return kernels::make_cpu_ops(1); });
}

TEST(TensorParallel, EveryDegreeGivesTheSameBits) {
  for (const testing::TpCase& k : testing::tp_cases()) {
    const ModelWeights w = make_synthetic_weights(k.config, 7);
    DecodeWorld world(5, 24, kBlock, k.config.vocab_size, 11);
    const std::vector<TestStep> steps = make_steps(world);
    const TpChunks chunks = tp_canonical_chunks(k.config);
    const auto one = run_tp(k.config, w, 1, chunks, steps, world.n_blocks());
    for (int32_t d : k.degrees) {
      if (d == 1) continue;
      const auto got = run_tp(k.config, w, d, chunks, steps, world.n_blocks());
      EXPECT_EQ(first_difference(got, one), -1)
          << k.name << ": TP " << d << " differs from TP 1 (chunks " << chunks.o << "/"
          << chunks.ffn << ")";
    }
  }
}

// The default model (9 q / 3 KV heads, FFN 1536) through TpGroup: TP 1, 2 and 4 — uneven ranks,
// and at 4 KV head 2 on two ranks — give the same logit bits, and so does TP 2 on the weights
// widened to fp32 (the ranks hold the file's Q4_1 blocks).
TEST(TensorParallel, DefaultModelEveryDegreeGivesTheSameBits) {
  const LoadedModel* m = default_model();
  if (m == nullptr)
    GTEST_SKIP() << "default model not installed (scripts/setup.sh, or DETLLM_DEFAULT_MODEL)";
  ASSERT_EQ(tp_canonical_chunks(m->config), (TpChunks{9, 8}));
  auto run = [&](int32_t degree, const ModelWeights& weights) {
    return default_model_tp_logits(*m, weights, degree, [] { return kernels::make_cpu_ops(1); });
  };
  const auto one = run(1, m->weights);
  for (int32_t d : {2, 4})
    EXPECT_EQ(first_difference(run(d, m->weights), one), -1)
        << "default model: TP " << d << " differs from TP 1";
  // The ranks keep the file's blocks (tp_slice_cols): the bits of their fp32 values.
  ModelWeights f32 = m->weights;
  dequantize_weights(f32);
  EXPECT_EQ(first_difference(run(2, f32), one), -1)
      << "default model: TP 2 on the widened weights differs from TP 1 on the blocks";
}

// The q8-activation class (cpu-q8: activations rounded to int8 per 32-block before the Q4_1
// matmuls) at TP 1, 2 and 4 on the default model: the same logit bits, since the canonical
// chunks (o 9 × 64, down 8 × 192) are whole 32-blocks, so every degree rounds the same blocks of
// x; and not the default class's bits (the class is real). Ranks with 1 or 2 threads alike.
TEST(TensorParallel, DefaultModelQ8EveryDegreeGivesTheSameBits) {
  const LoadedModel* m = default_model();
  if (m == nullptr)
    GTEST_SKIP() << "default model not installed (scripts/setup.sh, or DETLLM_DEFAULT_MODEL)";
  auto run = [&](int32_t degree, int threads, CpuActivations act) {
    return default_model_tp_logits(*m, m->weights, degree,
                                   [threads, act] { return kernels::make_cpu_ops(threads, act); });
  };
  const auto one = run(1, 2, CpuActivations::kQ8);
  for (int32_t d : {2, 4})
    EXPECT_EQ(first_difference(run(d, 1, CpuActivations::kQ8), one), -1)
        << "default model, q8 activations: TP " << d << " differs from TP 1";
  EXPECT_NE(first_difference(run(1, 2, CpuActivations::kF32), one), -1)
      << "q8 activations gave the f32 class's bits: the class did not take effect";
}

// Column slices keep a block type when they fall on its block boundaries (the ranks keep the
// file's blocks) and are the fp32 values otherwise; either way the slice holds the values of
// the same columns of the whole tensor.
TEST(TensorParallel, ColumnSlicesKeepBlocksOnBlockBoundaries) {
  const int64_t rows = 3, cols = 128;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (DType t : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0}) {
    HostTensor q;
    q.shape = {rows, cols};
    q.dtype = t;
    const int64_t rb = dtype_row_bytes(t, cols);
    q.raw.resize(static_cast<size_t>(rows * rb));
    for (int64_t r = 0; r < rows; ++r)
      quantize_row(t, x.data() + r * cols, q.raw.data() + r * rb, cols);
    HostTensor whole = q;
    dequantize_tensor(whole);
    for (auto [c0, n, keeps] : {std::tuple{32, 64, true}, std::tuple{0, 128, true},
                                std::tuple{16, 32, false}}) {
      HostTensor s = tp_slice_cols(q, c0, n);
      EXPECT_EQ(s.dtype, keeps ? t : DType::kF32) << dtype_name(t) << " " << c0;
      EXPECT_EQ(s.shape, (std::vector<int64_t>{rows, n}));
      dequantize_tensor(s);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < n; ++c)
          ASSERT_EQ(s.data[r * n + c], whole.data[r * cols + c0 + c])
              << dtype_name(t) << " row " << r << " col " << c0 + c;
    }
  }
}

// A backend whose GEMMs fail after `ok` of them: one rank's, to stop a group mid-step.
class FailingOps : public conformance::DelegatingOps {
 public:
  explicit FailingOps(int ok) : DelegatingOps(1), ok_(ok) {}
  void matmul_rounded(const void* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
                      float* y, int64_t ldy, NumericsMode numerics) override {
    if (ok_-- <= 0) throw_error("injected GEMM failure");
    DelegatingOps::matmul_rounded(x, m, w, bias, y, ldy, numerics);
  }

 private:
  int ok_;
};

// A rank that fails mid-step (the leader or another) stops the group with that rank's error —
// the others stop at their next exchange instead of waiting for it — and the group refuses
// later steps. A hang fails the test after a minute.
TEST(TensorParallel, AFailingRankStopsTheGroupWithItsError) {
  const ModelConfig c = tp4_config();
  const ModelWeights w = make_synthetic_weights(c, 7);
  DecodeWorld world(5, 24, kBlock, c.vocab_size, 11);
  const std::vector<TestStep> steps = make_steps(world);
  for (int failing : {0, 2}) {
    int made = 0;
    TpGroup group(c, w, 4, [&]() -> std::unique_ptr<kernels::Ops> {
      if (made++ == failing) return std::make_unique<FailingOps>(5);
      return kernels::make_cpu_ops(1);
    });
    KvStorage kv(group.leader().ops(), group.leader().config(), world.n_blocks(), kBlock);
    auto step = [&] {
      std::vector<float> logits;
      try {
        group.leader().forward(steps[0].tokens, steps[0].batch(), steps[0].logit_rows, kv, logits,
                               GraphMode::kOff);
        return std::string("no error");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    };
    auto first = std::async(std::launch::async, step);
    if (first.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "rank " << failing << " failed and the group hangs";
      std::_Exit(1);
    }
    const std::string msg = first.get();
    EXPECT_NE(msg.find("rank " + std::to_string(failing) + " of 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("injected GEMM failure"), std::string::npos) << msg;
    const std::string again = step();
    EXPECT_NE(again.find("earlier failure"), std::string::npos) << again;
  }
}

// The canonical chunks are a (small) numerics change against the one-device model: within a
// stated tolerance, |Δ logit| ≤ 1e-4 · (1 + |logit|) (fp32 sums of 4–8 partials instead of one
// chain; the logits here are O(1)).
TEST(TensorParallel, CanonicalChunksStayCloseToOneDevice) {
  for (const testing::TpCase& k : testing::tp_cases()) {
    const ModelWeights w = make_synthetic_weights(k.config, 7);
    DecodeWorld world(5, 24, kBlock, k.config.vocab_size, 11);
    const std::vector<TestStep> steps = make_steps(world);
    const auto chunked = run_tp(k.config, w, 1, tp_canonical_chunks(k.config), steps,
                                world.n_blocks());
    const auto plain = run_tp(k.config, w, 1, TpChunks{}, steps, world.n_blocks());
    double worst = 0;
    for (size_t s = 0; s < plain.size(); ++s) {
      ASSERT_EQ(plain[s].size(), chunked[s].size());
      for (size_t i = 0; i < plain[s].size(); ++i)
        worst = std::max(worst, std::fabs(double(plain[s][i]) - chunked[s][i]) /
                                    (1.0 + std::fabs(double(plain[s][i]))));
    }
    EXPECT_LE(worst, 1e-4) << k.name;
    std::printf("[tp] %s: canonical chunks vs one device, worst relative |Δ| %.3g\n",
                k.name.c_str(), worst);
  }
}

// Negative control: the naive partition — each rank sums its whole K slice, so the chunking
// follows the degree (chunks = degree) — is NOT invariant, and the comparison above sees it.
TEST(TensorParallel, NaivePartitionIsCaught) {
  const ModelConfig c = tp4_config();
  const ModelWeights w = make_synthetic_weights(c, 7);
  DecodeWorld world(5, 24, kBlock, c.vocab_size, 11);
  const std::vector<TestStep> steps = make_steps(world);
  const auto one = run_tp(c, w, 1, TpChunks{1, 1}, steps, world.n_blocks());
  const auto two = run_tp(c, w, 2, TpChunks{2, 2}, steps, world.n_blocks());
  EXPECT_NE(first_difference(two, one), -1)
      << "TP 2 with one K chunk per rank gave TP 1's bits: the comparison cannot fail";
}

TEST(TensorParallel, DegreesTheModelCannotSplitAreRefusedByName) {
  const ModelConfig c = synthetic_config("tiny-llama");  // 4 q / 2 KV heads, chunks 4 / 4
  try {
    check_tp_degree(c, 5);
    FAIL() << "degree 5 accepted with 4 o chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allows 1, 2, 3, 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_tp_degree(c, 0), Error);
  EXPECT_THROW(check_tp_degree(c, -1), Error);
  EXPECT_EQ(tp_canonical_chunks(synthetic_config("llama-3.1-8b")), (TpChunks{8, 8}));
  EXPECT_EQ(tp_canonical_chunks(c), (TpChunks{4, 4}));
  EXPECT_EQ(tp_allowed_degrees(synthetic_config("llama-3.1-8b")),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  // 16 q heads in 8 chunks of 2 over 16 KV heads: a chunk spans two KV groups, so only the
  // degrees whose group boundaries fall on chunk boundaries split it.
  ModelConfig odd = tp4_config();
  odd.n_heads = 16;
  odd.n_kv_heads = 16;
  EXPECT_EQ(tp_allowed_degrees(odd), (std::vector<int32_t>{1, 2, 4, 8}));
}

// The partition of the default model's shapes (SmolLM2-135M: 9 q / 3 KV heads, FFN 1536):
// chunks 9 / 8; T 2 gives ranks of 1 and 2 KV groups; T 4 splits the last group over two ranks,
// each holding a copy of KV head 2.
TEST(TensorParallel, DefaultModelShapesPartition) {
  ModelConfig c = tp4_config();
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.ffn_dim = 1536;
  EXPECT_EQ(tp_canonical_chunks(c), (TpChunks{9, 8}));
  EXPECT_EQ(tp_allowed_degrees(c), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  const TpPartition two = tp_partition(c, 2);
  EXPECT_EQ(two.o, (std::vector<int32_t>{0, 3, 9}));
  EXPECT_EQ(two.ffn, (std::vector<int32_t>{0, 4, 8}));
  EXPECT_EQ(two.kv_first, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(two.n_kv, (std::vector<int32_t>{1, 2}));
  const TpPartition four = tp_partition(c, 4);
  EXPECT_EQ(four.o, (std::vector<int32_t>{0, 3, 6, 7, 9}));
  EXPECT_EQ(four.kv_first, (std::vector<int32_t>{0, 1, 2, 2}));
  EXPECT_EQ(four.n_kv, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(tp_rank_config(c, four, 3).n_heads, 2);
  EXPECT_EQ(tp_rank_config(c, four, 3).ffn_dim, 384);
  EXPECT_FALSE(tp_try_partition(c, 9, tp_canonical_chunks(c)));  // 8 down chunks
}

}  // namespace
}  // namespace detllm
