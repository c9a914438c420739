// Sampling on the backend (one Ops::sample_rows call per step, logits left in backend memory)
// against host logits + host sampling (EngineConfig::host_sampling, the CPU sampler on every
// downloaded row): the same tokens, logprobs, top logprobs, prompt logprobs, captured logits and
// finish reasons, bit for bit — on the three tiny models, eager and padded (graphs on). Also:
// a step whose logits nobody reads downloads none, only the rows consumers read come to the
// host, and the conformance harness still records every output position's logits.
// GPU counterpart: tests/cuda/cuda_engine_sampling_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine_sampling_util.h"
#include "model/synthetic.h"
#include "verify/conformance.h"

namespace detllm::engine {
namespace {

using testing::count_finish;
using testing::first_difference;
using testing::Outcome;
using testing::run_workload;
using testing::sampling_workload;
using testing::set_stop_ids;
using testing::Workload;

EngineConfig small_engine(bool host_sampling, GraphMode graphs = GraphMode::kAuto) {
  EngineConfig c;
  c.scheduler.kv.block_size = 4;
  c.kv_cache_tokens = 2048;
  c.scheduler.max_tokens_per_step = 48;
  c.scheduler.chunk_size = 8;  // prompts arrive in chunks; prompt logprobs span several steps
  c.host_sampling = host_sampling;
  c.cuda_graphs = graphs;
  return c;
}

struct Case {
  const char* model;
  GraphMode graphs;
};

class EngineSampling : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    config_ = synthetic_config(GetParam().model);
    weights_ = make_synthetic_weights(config_, 5);
    ops_ = kernels::make_cpu_ops(2);
    model_ = std::make_unique<LlamaModel>(config_, weights_, *ops_);
  }
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<LlamaModel> model_;
};

TEST_P(EngineSampling, BackendSamplingEqualsHostSampling) {
  const GraphMode graphs = GetParam().graphs;
  Workload w = sampling_workload(config_.vocab_size, /*with_consumers=*/true);
  set_stop_ids(w, run_workload(*model_, small_engine(true, graphs), w));
  const Outcome host = run_workload(*model_, small_engine(true, graphs), w);
  const Outcome backend = run_workload(*model_, small_engine(false, graphs), w);
  EXPECT_EQ(first_difference(host, backend), "");
  EXPECT_GE(count_finish(backend, FinishReason::kStop), 1) << "no stop id was hit";
  EXPECT_GE(count_finish(backend, FinishReason::kLength), 1);
  EXPECT_EQ(host.stats.n_rows_sampled_on_backend, 0);
  EXPECT_EQ(backend.stats.n_rows_sampled_on_backend, backend.stats.n_generated_tokens);
  EXPECT_GT(backend.stats.n_generated_tokens, 60);
  if (graphs == GraphMode::kOn) {
    EXPECT_GT(backend.n_padded_steps, 0);
  }
}

TEST_P(EngineSampling, StepsWithoutLogitConsumersDownloadNoLogits) {
  const GraphMode graphs = GetParam().graphs;
  const Workload w = sampling_workload(config_.vocab_size, /*with_consumers=*/false);
  const Outcome host = run_workload(*model_, small_engine(true, graphs), w);
  const Outcome backend = run_workload(*model_, small_engine(false, graphs), w);
  EXPECT_EQ(first_difference(host, backend), "");
  EXPECT_EQ(backend.stats.n_logit_rows_downloaded, 0);
  EXPECT_EQ(backend.model_rows_downloaded, 0);
  EXPECT_GT(host.stats.n_logit_rows_downloaded, backend.stats.n_generated_tokens / 2);
  EXPECT_EQ(host.model_rows_downloaded, host.stats.n_logit_rows_downloaded);
}

// Prompt logprobs download the rows that score prompt tokens (n_prompt - 1 per request, not the
// decode rows after them); captured logits one row per sampled position; nothing else.
TEST_P(EngineSampling, OnlyRowsThatConsumersReadAreDownloaded) {
  const Workload w = sampling_workload(config_.vocab_size, /*with_consumers=*/true);
  const Outcome backend = run_workload(*model_, small_engine(false, GetParam().graphs), w);
  int64_t expected = 0;
  for (size_t i = 0; i < w.requests.size(); ++i) {
    const Request& r = w.requests[i];
    if (r.prompt_logprobs >= 0) expected += static_cast<int64_t>(r.prompt.size()) - 1;
    if (r.capture_logits && r.prompt_logprobs < 0) {
      expected += static_cast<int64_t>(backend.requests[i].logits.size());
      EXPECT_EQ(backend.requests[i].logits.size(), backend.requests[i].tokens[0].size());
    }
  }
  EXPECT_EQ(backend.stats.n_logit_rows_downloaded, expected);
  EXPECT_EQ(backend.model_rows_downloaded, expected);
}

INSTANTIATE_TEST_SUITE_P(Tiny, EngineSampling,
                         ::testing::Values(Case{"tiny-llama", GraphMode::kOff},
                                           Case{"tiny-llama", GraphMode::kOn},
                                           Case{"tiny-qwen2", GraphMode::kOff},
                                           Case{"tiny-qwen3", GraphMode::kOn}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n + (info.param.graphs == GraphMode::kOn ? "_padded" : "_eager");
                         });

// The conformance harness captures logits (Request::capture_logits): with backend sampling it
// still records the fp32 logits of every output position, and its traces equal those of host
// sampling bit for bit.
TEST(EngineSamplingHarness, HarnessRecordsLogitsOfEveryOutputPosition) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 42);
  conformance::Target target;
  target.name = "tiny-llama";
  target.config = &config;
  target.weights = &weights;
  target.make_ops = [](int n) { return kernels::make_cpu_ops(n); };
  conformance::WorkloadSpec spec;
  spec.vocab_size = config.vocab_size;
  spec.n_requests = 8;
  const std::vector<Request> reqs = conformance::random_workload(7, spec);
  conformance::Execution backend;
  backend.label = "backend sampling";
  backend.engine = small_engine(false);
  conformance::Execution host = backend;
  host.label = "host sampling";
  host.engine.host_sampling = true;
  const conformance::RunResult a = conformance::run(target, backend, reqs);
  const conformance::RunResult b = conformance::run(target, host, reqs);
  ASSERT_EQ(a.traces.size(), reqs.size());
  int64_t n_generated = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const conformance::RequestTrace& t = a.traces[i];
    const auto n_prompt = static_cast<int32_t>(reqs[i].prompt.size());
    for (size_t k = 0; k < t.tokens.size(); ++k) {
      for (size_t j = 0; j < t.tokens[k].size(); ++j) {
        const auto key =
            std::make_pair(static_cast<int32_t>(k), n_prompt + static_cast<int32_t>(j));
        ASSERT_TRUE(t.logits.count(key)) << "request " << i << " sample " << k << " token " << j;
        EXPECT_EQ(t.logits.at(key).size(), static_cast<size_t>(config.vocab_size));
        ++n_generated;
      }
    }
    const auto mismatch = conformance::compare(t, b.traces[i]);
    EXPECT_FALSE(mismatch) << "request " << i << ": " << mismatch->what;
  }
  EXPECT_GT(n_generated, 10);
}

}  // namespace
}  // namespace detllm::engine
