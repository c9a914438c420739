// The conformance harness (src/verify/conformance.h) on Llama-3.1-8B's real shapes: the
// synthetic 8B model generated once on the GPU (16 GB of bf16, shared by every test of this
// file through Target::shared_model) on the CUDA backend in invariant mode, with a small
// workload of prompts of 20–300 random token ids. Bit for bit: V1 each request alone vs all
// together (and device vs host sampling), V3 chunks of 7, 64 and whole prompts, V4 generation
// logits == scoring logits, V5 prefix cache cold / warm / partial, V6 preemption and recompute
// on shuffled blocks, V7 shuffled blocks after a fragmenting warm-up, V8 CUDA graphs and
// padding on vs off. Also, on any machine: the harness's three model sources (host weights,
// synthetic recipe, shared model) give the same bits. About 30–60 s on an H200.
// Run: build-cuda/tests/test_cuda --gtest_filter='Llama8bConformance*:ConformanceTargetSources*'
// (the 8B tests skip without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "conformance/conformance_checks.h"
#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "verify/conformance.h"

namespace detllm::conformance {
namespace {

using checks::generation_equals_scoring;
using checks::run_alone;
using checks::same_traces;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- The harness's model sources agree (host weights / recipe / shared model) --------------

// Runs one workload with the model from host weights, from the recipe (generated in the
// backend's memory each run) and shared across runs (twice, so the second run reuses a model
// that already ran): every trace must be the same bits.
void expect_sources_agree(const std::function<std::unique_ptr<kernels::Ops>(int)>& make_ops) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  const SyntheticWeights recipe = synthetic_recipe(config, 42);
  WorkloadSpec spec;
  spec.vocab_size = config.vocab_size;
  const auto reqs = random_workload(21, spec);
  Execution e;
  e.label = "sources";
  e.engine.scheduler.kv.block_size = 4;
  e.engine.kv_cache_tokens = 1024;

  Target host;
  host.name = "tiny-llama, host weights";
  host.config = &config;
  host.weights = &weights;
  host.make_ops = make_ops;
  Target generated = host;
  generated.name = "tiny-llama, recipe";
  generated.weights = nullptr;
  generated.recipe = &recipe;
  auto shared_ops = make_ops(2);
  LlamaModel shared_model(config, recipe, *shared_ops);
  Target shared;
  shared.name = "tiny-llama, shared model";
  shared.config = &config;
  shared.shared_model = [&]() -> LlamaModel& { return shared_model; };

  const RunResult ref = run(host, e, reqs);
  EXPECT_TRUE(same_traces(reqs, ref.traces, run(generated, e, reqs))) << "recipe";
  EXPECT_TRUE(same_traces(reqs, ref.traces, run(shared, e, reqs))) << "shared model, run 1";
  EXPECT_TRUE(same_traces(reqs, ref.traces, run(shared, e, reqs))) << "shared model, run 2";

  Target bad = host;  // two sources: refused with a message
  bad.recipe = &recipe;
  EXPECT_THROW(run(bad, e, reqs), Error);
}

TEST(ConformanceTargetSources, CpuHostWeightsRecipeAndSharedModelAgree) {
  expect_sources_agree([](int n) { return kernels::make_cpu_ops(n); });
}

TEST(ConformanceTargetSources, CudaHostWeightsRecipeAndSharedModelAgree) {
  DETLLM_SKIP_WITHOUT_GPU();
  expect_sources_agree([](int) { return kernels::cuda_testing::invariant_ops(); });
}

// ---- Llama-3.1-8B on the GPU ---------------------------------------------------------------

class Llama8bConformance : public ::testing::Test {
 protected:
  static constexpr uint64_t kWeightSeed = 8;

  // One model for the whole file: generating it is fast (~0.05 s) but its 16 GB and the
  // verified GEMM plans (tuned per ops object, up to ~1 s per shape and row bucket) are not
  // worth repeating per run.
  static void SetUpTestSuite() {
    if (kernels::cuda_device_count() == 0) return;
    config_ = std::make_unique<ModelConfig>(synthetic_config("llama-3.1-8b"));
    ops_ = kernels::cuda_testing::invariant_ops();
    const auto t0 = std::chrono::steady_clock::now();
    model_ = std::make_unique<LlamaModel>(*config_, synthetic_recipe(*config_, kWeightSeed), *ops_);
    ops_->synchronize();
    std::printf("[llama-8b] weights generated on the GPU in %.2f s\n", seconds_since(t0));
  }
  static void TearDownTestSuite() {  // frees the 16 GB before the binary's other suites run
    reference_.clear();
    model_.reset();
    ops_.reset();
    config_.reset();
  }
  void SetUp() override {
    DETLLM_SKIP_WITHOUT_GPU();  // SetUpTestSuite made no model without a device
    ASSERT_TRUE(model_) << "the Llama-8B model was not made";
    target_.name = "llama-3.1-8b (synthetic, generated on the GPU)";
    target_.config = config_.get();
    target_.shared_model = []() -> LlamaModel& { return *model_; };
  }

  // The baseline every test varies, and its workload (checks::large_model_exec / _workload).
  static Execution exec(std::string label) { return checks::large_model_exec(std::move(label)); }
  static std::vector<engine::Request> workload(uint64_t seed, double scoring_share = 0.25) {
    return checks::large_model_workload(seed, config_->vocab_size, scoring_share);
  }
  static const std::vector<engine::Request>& requests() {
    static const std::vector<engine::Request> reqs = workload(81);
    return reqs;
  }
  // Each request of requests() alone in a fresh engine (graphs as the backend chooses: on):
  // computed once, compared by every test.
  const std::vector<RequestTrace>& reference() {
    if (reference_.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      reference_ = run_alone(target_, exec("alone"), requests());
      std::printf("[llama-8b] reference (each request alone) in %.2f s\n", seconds_since(t0));
    }
    return reference_;
  }
  RunResult timed_run(const Execution& e, const std::vector<engine::Request>& reqs) {
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = run(target_, e, reqs);
    std::printf(
        "[llama-8b] %-34s %3lld steps, %2lld preemptions, %4lld cached tokens, "
        "%2lld graph replays: %.2f s\n",
        e.label.c_str(), static_cast<long long>(r.n_steps), static_cast<long long>(r.n_preemptions),
        static_cast<long long>(r.n_cached_tokens), static_cast<long long>(r.n_graph_replays),
        seconds_since(t0));
    return r;
  }

  static inline std::unique_ptr<ModelConfig> config_;
  static inline std::unique_ptr<kernels::Ops> ops_;
  static inline std::unique_ptr<LlamaModel> model_;
  static inline std::vector<RequestTrace> reference_;
  Target target_;
};

// V1: each request alone vs all of them in the same steps (in two add orders); the same with
// every token sampled on the host from downloaded logits instead of on the device.
TEST_F(Llama8bConformance, V1_AloneVsTogether) {
  const auto& reqs = requests();
  const auto& ref = reference();
  ASSERT_TRUE(same_traces(reqs, ref, timed_run(exec("V1 together"), reqs))) << "V1 together";
  Execution reversed = exec("V1 together, reversed add order");
  reversed.add_order.resize(reqs.size());
  std::iota(reversed.add_order.rbegin(), reversed.add_order.rend(), 0);
  ASSERT_TRUE(same_traces(reqs, ref, timed_run(reversed, reqs))) << reversed.label;
  Execution host = exec("V1 together, host sampling");
  host.engine.host_sampling = true;
  ASSERT_TRUE(same_traces(reqs, ref, timed_run(host, reqs))) << host.label;
}

// V3: prompts chunked by 7 and 64 under small step budgets, and whole prompts one or two per
// step.
TEST_F(Llama8bConformance, V3_Chunking) {
  const auto& reqs = requests();
  const auto& ref = reference();
  for (const auto& [chunk, budget] : {std::pair{7, 20}, std::pair{64, 100}, std::pair{0, 512}}) {
    Execution e = exec("V3 chunk " + std::to_string(chunk) + ", budget " + std::to_string(budget));
    e.engine.scheduler.chunk_size = chunk;
    e.engine.scheduler.max_tokens_per_step = budget;
    ASSERT_TRUE(same_traces(reqs, ref, timed_run(e, reqs))) << e.label;
  }
}

// V4: the logits each token was generated with == the logits of re-scoring the finished
// sequence (chunked differently), and so the logprobs.
TEST_F(Llama8bConformance, V4_GenerationEqualsScoring) {
  const auto reqs = workload(82, /*scoring_share=*/0);
  const RunResult gen = timed_run(exec("V4 generate"), reqs);
  Execution se = exec("V4 score, chunk 64");
  se.engine.scheduler.chunk_size = 64;
  se.engine.scheduler.max_tokens_per_step = 160;
  const RunResult sc = timed_run(se, scoring_requests(reqs, gen));
  size_t n_compared = 0;
  ASSERT_TRUE(generation_equals_scoring(reqs, gen, sc, &n_compared));
  EXPECT_GE(n_compared, 16u);
}

// V5: prefix cache off (cold), warm (the same prompts ran before in the engine) and partial
// (prompts cut in the middle of a block, other continuations, ran before).
TEST_F(Llama8bConformance, V5_PrefixCacheWarmVsCold) {
  const auto& reqs = requests();
  const auto& ref = reference();
  Execution cold = exec("V5 cache off");
  cold.engine.scheduler.kv.enable_prefix_cache = false;
  ASSERT_TRUE(same_traces(reqs, ref, timed_run(cold, reqs))) << cold.label;
  Execution warm = exec("V5 warm cache");
  warm.warmup = reqs;
  const RunResult w = timed_run(warm, reqs);
  ASSERT_TRUE(same_traces(reqs, ref, w)) << warm.label;
  EXPECT_GT(w.n_cached_tokens, 0) << "the warm run never hit the prefix cache";
  Execution partial = exec("V5 partial hits");
  partial.warmup = partial_prefix_warmup(reqs);
  const RunResult p = timed_run(partial, reqs);
  ASSERT_TRUE(same_traces(reqs, ref, p)) << partial.label;
  EXPECT_GT(p.n_cached_tokens, 0) << "the partial run never hit the prefix cache";
}

// V6 + V7: three unrelated 254-token prompts, 6 new tokens each (17 blocks of 16), in a pool of
// 33 shuffled blocks: two are admitted (16 blocks each), both need a 17th block after two
// decode steps and only one is left, so the newer is preempted and recomputed later. Then V7
// alone: the workload on shuffled blocks after a warm-up that leaves the pool fragmented.
TEST_F(Llama8bConformance, V6_V7_PreemptionAndShuffledBlocks) {
  std::mt19937_64 rng(83);
  std::vector<engine::Request> longs(3);
  for (size_t i = 0; i < longs.size(); ++i) {
    longs[i].prompt.resize(254);
    for (auto& t : longs[i].prompt) t = static_cast<int32_t>(rng() % config_->vocab_size);
    longs[i].max_tokens = 6;
    longs[i].sampling.temperature = i == 0 ? 0.0f : 0.8f;
    longs[i].sampling.seed = 1000 + i;
    longs[i].sampling.n_logprobs = 2;
  }
  const auto long_ref = run_alone(target_, exec("alone"), longs);
  Execution tiny = exec("V6+V7 preemption, shuffled blocks");
  tiny.engine.kv_cache_tokens = 0;
  tiny.engine.scheduler.kv.n_blocks = 33;
  tiny.engine.scheduler.kv.shuffle_blocks = true;
  tiny.engine.scheduler.kv.shuffle_seed = 5;
  const RunResult pre = timed_run(tiny, longs);
  EXPECT_GT(pre.n_preemptions, 0) << "the 33-block pool did not force a preemption";
  ASSERT_TRUE(same_traces(longs, long_ref, pre)) << tiny.label;

  const auto& reqs = requests();
  Execution shuffled = exec("V7 shuffled blocks, fragmented");
  shuffled.engine.scheduler.kv.shuffle_blocks = true;
  shuffled.engine.scheduler.kv.shuffle_seed = 6;
  shuffled.warmup = workload(84);
  ASSERT_TRUE(same_traces(reqs, reference(), timed_run(shuffled, reqs))) << shuffled.label;
}

// V8: decode steps run eagerly, unpadded (graphs off) vs padded to a row bucket and replayed
// from CUDA graphs (the reference runs with the backend's default, on), also with 3 rows in
// bucket 4 and rows in shuffled order.
TEST_F(Llama8bConformance, V8_GraphsOnVsOff) {
  const auto& reqs = requests();
  const auto& ref = reference();
  Execution off = exec("V8 graphs off");
  off.engine.cuda_graphs = GraphMode::kOff;
  const RunResult o = timed_run(off, reqs);
  EXPECT_EQ(o.n_padded_steps, 0);
  ASSERT_TRUE(same_traces(reqs, ref, o)) << off.label;

  Execution on = exec("V8 graphs on, 3 rows, shuffled");
  on.engine.cuda_graphs = GraphMode::kOn;
  on.engine.scheduler.max_seqs = 3;
  on.add_order = {2, 0, 3, 1};
  on.arrival = {0, 1, 0, 2};
  const RunResult g = timed_run(on, reqs);
  EXPECT_GT(g.n_padded_steps, 0) << "no decode step was padded";
  EXPECT_GT(g.n_graph_replays, 0) << "no graph was replayed";
  ASSERT_TRUE(same_traces(reqs, ref, g)) << on.label;
}

}  // namespace
}  // namespace detllm::conformance
