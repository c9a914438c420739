// Test helpers of tensor parallelism shared by tests/model/tensor_parallel_test.cpp (CPU ranks)
// and tests/cuda/cuda_tensor_parallel_test.cpp (CUDA ranks on one GPU): the same steps — a
// mixed prefill of several prompts on shuffled pages, then decode steps over shuffled subsets —
// run at a degree with every rank on ops of its own, the logits of every rank compared bit for
// bit; the model cases and their degrees; the default model through a TpGroup.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "model/decode_steps_util.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/synthetic.h"
#include "model/tensor_parallel.h"
#include "model/tp_group.h"

namespace detllm::testing {

using MakeRankOps = std::function<std::unique_ptr<kernels::Ops>()>;

inline constexpr int32_t kBlock = 4;

// Prefill of one sequence per length (default: 5, lengths 3…11) in one step, then n_decode
// decode steps over shuffled subsets.
inline std::vector<TestStep> make_steps(DecodeWorld& world,
                                        std::vector<int32_t> lens = {3, 11, 6, 1, 8},
                                        int n_decode = 6) {
  const int32_t n_seqs = static_cast<int32_t>(lens.size());
  std::vector<TestStep> steps;
  TestStep pre;
  {
    // One prefill step of every sequence: concatenate per-sequence steps of different lengths.
    std::vector<TestStep> parts;
    for (int32_t s = 0; s < n_seqs; ++s) parts.push_back(world.step({s}, lens[s]));
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
    pre.n_seqs = n_seqs;
  }
  steps.push_back(pre);
  for (int i = 0; i < n_decode; ++i) steps.push_back(world.step(world.pick(1 + i % n_seqs)));
  return steps;
}

// Every step's logits (rank 0's), after checking that every rank's are the same bits. Each
// rank on ops from make_ops() with its own model and KV storage, each step run on a thread a rank.
inline std::vector<std::vector<float>> run_tp(const ModelConfig& c, const ModelWeights& w,
                                              int32_t degree, TpChunks chunks,
                                              const std::vector<TestStep>& steps, int32_t n_blocks,
                                              const MakeRankOps& make_ops,
                                              int32_t block_size = kBlock) {
  const TpPartition part = tp_partition(c, degree, chunks);
  TpExchange exchange(degree);
  std::vector<ModelWeights> rw;
  std::vector<std::unique_ptr<kernels::Ops>> ops;
  std::vector<std::unique_ptr<LlamaModel>> models;
  std::vector<std::unique_ptr<KvStorage>> kv;
  for (int32_t r = 0; r < degree; ++r) rw.push_back(tp_rank_weights(w, c, part, r));
  for (int32_t r = 0; r < degree; ++r) {
    const ModelConfig rc = tp_rank_config(c, part, r);
    ops.push_back(make_ops());
    const TpRank tp = tp_rank(part, r, degree > 1 ? &exchange : nullptr);
    models.push_back(std::make_unique<LlamaModel>(rc, rw[r], *ops[r], ProjectionLayout::kAuto, tp));
    kv.push_back(std::make_unique<KvStorage>(*ops[r], rc, n_blocks, block_size));
  }
  std::vector<std::vector<float>> out;
  for (const TestStep& st : steps) {
    std::vector<std::vector<float>> logits(degree);
    std::vector<std::exception_ptr> errors(degree);
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < degree; ++r)
      threads.emplace_back([&, r] {
        try {
          ops[r]->bind_thread();
          models[r]->forward(st.tokens, st.batch(), st.logit_rows, *kv[r], logits[r],
                             GraphMode::kOff);
        } catch (...) {
          errors[r] = std::current_exception();
          exchange.abort();  // the other ranks stop at their exchange instead of waiting
        }
      });
    for (std::thread& t : threads) t.join();
    // A rank's own error first; the others' TpAborted only say that it failed.
    for (int pass = 0; pass < 2; ++pass)
      for (const std::exception_ptr& e : errors) {
        if (!e) continue;
        try {
          std::rethrow_exception(e);
        } catch (const TpAborted&) {
          if (pass == 1) throw;
        }
      }
    for (int32_t r = 1; r < degree; ++r)
      EXPECT_EQ(std::memcmp(logits[r].data(), logits[0].data(), logits[0].size() * 4), 0)
          << "rank " << r << " of " << degree << " holds other logits than rank 0";
    out.push_back(std::move(logits[0]));
  }
  return out;
}

// The first differing logit of two runs, or -1.
inline int64_t first_difference(const std::vector<std::vector<float>>& a,
                                const std::vector<std::vector<float>>& b) {
  int64_t at = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    if (a[s].size() != b[s].size()) return at;
    for (size_t i = 0; i < a[s].size(); ++i, ++at)
      if (std::memcmp(&a[s][i], &b[s][i], 4) != 0) return at;
  }
  return -1;
}

// max over steps and logits of |a - b| / max|a| (the step's largest logit): a tolerance.
inline double worst_relative_difference(const std::vector<std::vector<float>>& a,
                                        const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    float scale = 0;
    for (float v : a[s]) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a[s].size(); ++i)
      worst = std::max(worst, std::fabs(double{a[s][i]} - b[s][i]) / scale);
  }
  return worst;
}

// Llama-3.1-8B's layer shapes (dim 4096, 32 q / 8 KV heads of 128, FFN 14336, canonical
// chunks 8 / 8) with 2 layers and a 4096-token vocabulary: host weights of ~1.8 GB for the
// ranks to slice.
inline ModelConfig llama8b_layer_shapes() {
  ModelConfig c = synthetic_config("llama-3.1-8b");
  c.n_layers = 2;
  c.vocab_size = 4096;
  c.validate("llama-3.1-8b, 2 layers");
  return c;
}

// tiny-llama with 8 q / 4 KV heads and a 256-wide FFN: degrees 1, 2 and 4.
inline ModelConfig tp4_config() {
  ModelConfig c = synthetic_config("tiny-llama");
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn_dim = 256;
  c.validate("tp4");
  return c;
}

struct TpCase {
  std::string name;
  ModelConfig config;
  std::vector<int32_t> degrees;
};

inline std::vector<TpCase> tp_cases() {
  // Degrees 3 and 4 with 2 KV heads: uneven ranks and KV heads replicated on the ranks whose
  // q heads share them; 3 on tp4 (4 KV heads): uneven whole groups.
  return {{"tiny-llama", synthetic_config("tiny-llama"), {1, 2, 3, 4}},
          {"tiny-qwen2", synthetic_config("tiny-qwen2"), {1, 2, 4}},
          {"tiny-qwen3", synthetic_config("tiny-qwen3"), {1, 2, 3}},
          {"tp4", tp4_config(), {1, 2, 3, 4}}};
}

// The default model (SmolLM2-135M-Instruct Q4_1), loaded once for the tests below; nullptr when
// it is not installed (scripts/setup.sh; $DETLLM_DEFAULT_MODEL).
inline const LoadedModel* default_model() {
  static const std::unique_ptr<LoadedModel> m = []() -> std::unique_ptr<LoadedModel> {
    const std::string path = find_default_model();
    std::error_code ec;
    if (path.empty() || !std::filesystem::exists(path, ec)) return nullptr;
    return load_model(path);
  }();
  return m.get();
}

// Its logits over a mixed prefill of 3 prompts and 4 decode steps, through a TpGroup of `degree`
// ranks on make_ops() each: the engine's way.
inline std::vector<std::vector<float>> default_model_tp_logits(const LoadedModel& m,
                                                               const ModelWeights& weights,
                                                               int32_t degree,
                                                               const MakeRankOps& make_ops) {
  const ModelConfig& c = m.config;
  DecodeWorld world(3, 16, kBlock, c.vocab_size, 11);
  const std::vector<TestStep> steps = make_steps(world, {5, 2, 7}, 4);
  TpGroup group(c, weights, degree, make_ops);
  KvStorage kv(group.leader().ops(), group.leader().config(), world.n_blocks(), kBlock);
  std::vector<std::vector<float>> out;
  for (const TestStep& st : steps) {
    out.emplace_back();
    group.leader().forward(st.tokens, st.batch(), st.logit_rows, kv, out.back(), GraphMode::kOff);
  }
  return out;
}

}  // namespace detllm::testing
