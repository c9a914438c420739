// Tensor parallelism invariant across degrees (model/tensor_parallel.h; issue 17), on the CPU
// with ranks as threads: the same steps — a mixed prefill of several prompts on shuffled pages,
// then decode steps over shuffled subsets of the sequences — run at TP 1, 2 (and 4 where the
// model has 4 KV heads), each rank with its own ops, sharded weights and KV storage. Every
// logit bit of every step equals TP 1's, on every rank; TP 1 with the canonical chunks stays
// within a stated tolerance of the one-device model; and the naive partition (one K chunk per
// rank, so the chunking follows the degree) is caught differing — the check can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/decode_steps_util.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "model/tensor_parallel.h"

namespace detllm {
namespace {

using testing::DecodeWorld;
using testing::TestStep;

constexpr int32_t kBlock = 4;

// Prefill of 5 sequences (lengths 3…11) in one step, then 6 decode steps over shuffled subsets.
std::vector<TestStep> make_steps(DecodeWorld& world) {
  std::vector<TestStep> steps;
  TestStep pre;
  {
    // One prefill step of every sequence: concatenate per-sequence steps of different lengths.
    const int32_t lens[] = {3, 11, 6, 1, 8};
    std::vector<TestStep> parts;
    for (int32_t s = 0; s < 5; ++s) parts.push_back(world.step({s}, lens[s]));
    for (const TestStep& p : parts) pre.max_blocks = std::max(pre.max_blocks, p.max_blocks);
    for (size_t s = 0; s < parts.size(); ++s) {
      const TestStep& p = parts[s];
      const int32_t base = static_cast<int32_t>(pre.tokens.size());
      for (size_t i = 0; i < p.tokens.size(); ++i) {
        pre.tokens.push_back(p.tokens[i]);
        pre.positions.push_back(p.positions[i]);
        pre.seq_of_token.push_back(static_cast<int32_t>(s));
        pre.slots.push_back(p.slots[i]);
        pre.logit_rows.push_back(base + static_cast<int32_t>(i));
      }
      for (int32_t b = 0; b < pre.max_blocks; ++b)
        pre.tables.push_back(b < p.max_blocks ? p.tables[b] : -1);
    }
    pre.n_seqs = 5;
  }
  steps.push_back(pre);
  for (int i = 0; i < 6; ++i) steps.push_back(world.step(world.pick(1 + i % 5)));
  return steps;
}

// Every step's logits (rank 0's), after checking that every rank's are the same bits.
std::vector<std::vector<float>> run_tp(const ModelConfig& c, const ModelWeights& w, int32_t degree,
                                       TpChunks chunks, const std::vector<TestStep>& steps,
                                       int32_t n_blocks) {
  const ModelConfig rc = tp_rank_config(c, degree);
  TpExchange exchange(degree);
  std::vector<ModelWeights> rw;
  std::vector<std::unique_ptr<kernels::Ops>> ops;
  std::vector<std::unique_ptr<LlamaModel>> models;
  std::vector<std::unique_ptr<KvStorage>> kv;
  for (int32_t r = 0; r < degree; ++r) rw.push_back(tp_rank_weights(w, c, degree, r));
  for (int32_t r = 0; r < degree; ++r) {
    ops.push_back(kernels::make_cpu_ops(1));
    TpRank tp{chunks, degree, r, degree > 1 ? &exchange : nullptr};
    models.push_back(
        std::make_unique<LlamaModel>(rc, rw[r], *ops[r], ProjectionLayout::kAuto, tp));
    kv.push_back(std::make_unique<KvStorage>(*ops[r], rc, n_blocks, kBlock));
  }
  std::vector<std::vector<float>> out;
  for (const TestStep& st : steps) {
    std::vector<std::vector<float>> logits(degree);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < degree; ++r)
      threads.emplace_back([&, r] {
        models[r]->forward(st.tokens, st.batch(), st.logit_rows, *kv[r], logits[r],
                           GraphMode::kOff);
      });
    for (std::thread& t : threads) t.join();
    for (int32_t r = 1; r < degree; ++r)
      EXPECT_EQ(std::memcmp(logits[r].data(), logits[0].data(), logits[0].size() * 4), 0)
          << "rank " << r << " of " << degree << " holds other logits than rank 0";
    out.push_back(std::move(logits[0]));
  }
  return out;
}

// The first differing logit of two runs, or -1.
int64_t first_difference(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b) {
  int64_t at = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s].size() != b[s].size()) return at;
    for (size_t i = 0; i < a[s].size(); ++i, ++at)
      if (std::memcmp(&a[s][i], &b[s][i], 4) != 0) return at;
  }
  return -1;
}

// tiny-llama with 8 q / 4 KV heads and a 256-wide FFN: degrees 1, 2 and 4.
ModelConfig tp4_config() {
  ModelConfig c = synthetic_config("tiny-llama");
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn_dim = 256;
  c.validate("tp4");
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
  std::vector<int32_t> degrees;
};

std::vector<Case> cases() {
  return {{"tiny-llama", synthetic_config("tiny-llama"), {1, 2}},
          {"tiny-qwen2", synthetic_config("tiny-qwen2"), {1, 2}},
          {"tiny-qwen3", synthetic_config("tiny-qwen3"), {1, 2}},
          {"tp4", tp4_config(), {1, 2, 4}}};
}

TEST(TensorParallel, EveryDegreeGivesTheSameBits) {
  for (const Case& k : cases()) {
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

// The canonical chunks are a (small) numerics change against the one-device model: within a
// stated tolerance, |Δ logit| ≤ 1e-4 · (1 + |logit|) (fp32 sums of 4–8 partials instead of one
// chain; the logits here are O(1)).
TEST(TensorParallel, CanonicalChunksStayCloseToOneDevice) {
  for (const Case& k : cases()) {
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
  const ModelConfig c = synthetic_config("tiny-llama");  // 2 KV heads
  try {
    check_tp_degree(c, 4);
    FAIL() << "degree 4 accepted with 2 KV heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("allows 1, 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_tp_degree(c, 0), Error);
  EXPECT_EQ(tp_canonical_chunks(synthetic_config("llama-3.1-8b")), (TpChunks{8, 8}));
  EXPECT_EQ(tp_canonical_chunks(c), (TpChunks{4, 4}));
}

}  // namespace
}  // namespace detllm
