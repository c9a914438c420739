// Conformance on the real default model (SmolLM2-135M-Instruct, GGUF Q4_1 dequantized), shared
// by every backend like conformance_suite.h: the variations most likely to expose a real-shape
// kernel problem — batching (V1), chunking (V3), generation vs scoring (V4), preemption with
// shuffled blocks (V6, V7), on the CPU threads (V11), and speculative decoding — compared bit
// for bit. Skipped, with the reason, when the model is not installed (scripts/setup.sh installs
// it; DETLLM_DEFAULT_MODEL points elsewhere), when DETLLM_DEFAULT_MODEL names a missing file, or
// when the backend cannot run. Included by tests/conformance/default_model_test.cpp
// (CPU) and tests/cuda/cuda_default_model_test.cpp (GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "conformance/speculation_checks.h"
#include "model/model_loader.h"
#include "verify/conformance.h"

namespace detllm::conformance {

// Defined once by the including test binary (as for conformance_suite.h).
std::unique_ptr<kernels::Ops> suite_make_ops(int n_threads);
bool suite_backend_available(std::string* why);

namespace {

class DefaultModelConformance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = find_default_model();
    if (path.empty()) {
      skip_reason_ = "default model not installed: run scripts/setup.sh";
      return;
    }
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {  // only DETLLM_DEFAULT_MODEL can name one
      skip_reason_ = "DETLLM_DEFAULT_MODEL=" + path +
                     ": no such file: point it at SmolLM2-135M-Instruct.Q4_1.gguf or unset it "
                     "(scripts/setup.sh installs the model under models/)";
      return;
    }
    model_ = load_model(path).release();  // a file that does not load is a failure, not a skip
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << skip_reason_;
    target_.name = "smollm2-135m";
    target_.config = &model_->config;
    target_.weights = &model_->weights;
    std::string why;
    if (!suite_backend_available(&why)) GTEST_SKIP() << why;
    target_.make_ops = [](int n) { return suite_make_ops(n); };
  }
  static Execution exec(std::string label, int threads = 2) {
    Execution e;
    e.label = std::move(label);
    e.engine.scheduler.kv.block_size = 16;
    e.engine.kv_cache_tokens = 1024;
    e.n_threads = threads;
    return e;
  }
  std::vector<engine::Request> workload() const {
    WorkloadSpec s;
    s.n_requests = 4;
    s.vocab_size = model_->config.vocab_size;
    s.min_prompt = 3;
    s.max_prompt = 24;
    s.max_new_tokens = 6;
    s.scoring_share = 0;
    s.allow_n_samples = false;
    return random_workload(77, s);
  }
  void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
    ASSERT_EQ(a.traces.size(), b.traces.size());
    for (size_t i = 0; i < a.traces.size(); ++i) {
      const auto m = compare(a.traces[i], b.traces[i]);
      ASSERT_FALSE(m.has_value()) << what << ": request " << i << ": " << m->what;
    }
  }
  void expect_exercised(const Expect& want, const std::vector<engine::Request>& reqs,
                        const RunResult& got, const std::string& what,
                        const std::vector<RequestTrace>* ref = nullptr) {
    const auto why = not_exercised(want, reqs, got, ref);
    EXPECT_FALSE(why.has_value()) << what << ": the variation did not happen: " << *why;
  }
  static inline LoadedModel* model_ = nullptr;
  static inline std::string skip_reason_;
  Target target_;
};

TEST_F(DefaultModelConformance, BatchingChunkingPreemptionThreads) {
  const auto reqs = workload();
  // Reference: each request alone, whole prompt, 1 thread.
  RunResult ref;
  for (const auto& r : reqs) ref.traces.push_back(run(target_, exec("alone", 1), {r}).traces[0]);

  const RunResult batched = run(target_, exec("batched, 2 threads"), reqs);
  expect_same(ref, batched, "V1+V11 batched");
  Expect together;
  together.requests_in_step = static_cast<int32_t>(reqs.size());  // all in the first step
  expect_exercised(together, reqs, batched, "V1 batched");
  Execution chunked = exec("chunk 5");
  chunked.engine.scheduler.chunk_size = 5;
  chunked.engine.scheduler.max_tokens_per_step = 12;
  const RunResult chunks = run(target_, chunked, reqs);
  expect_same(ref, chunks, "V3 chunk 5");
  Expect five;
  five.chunk_size = 5;
  expect_exercised(five, reqs, chunks, "V3 chunk 5");
  // Preemption: every prompt 14 tokens + 6 new = 5 blocks of 4; two sequences are admitted
  // (4 blocks each) and both need a fifth block while only one is left.
  auto long_reqs = reqs;
  for (auto& r : long_reqs) {
    r.prompt.resize(14, 100);
    r.max_tokens = 6;
  }
  RunResult long_ref;
  for (const auto& r : long_reqs) {
    long_ref.traces.push_back(run(target_, exec("alone", 1), {r}).traces[0]);
  }
  Execution tiny = exec("tiny KV");
  tiny.engine.kv_cache_tokens = 0;
  tiny.engine.scheduler.kv.block_size = 4;
  tiny.engine.scheduler.kv.n_blocks = 9;  // 36 tokens: the longest request (30) fits alone
  tiny.engine.scheduler.kv.shuffle_blocks = true;
  const RunResult pre = run(target_, tiny, long_reqs);
  Expect moved;
  moved.preemption = true;
  moved.other_layout = true;
  expect_exercised(moved, long_reqs, pre, "V6+V7 preemption, shuffled blocks", &long_ref.traces);
  expect_same(long_ref, pre, "V6+V7 preemption, shuffled blocks");
}

TEST_F(DefaultModelConformance, GenerationLogitsEqualScoringLogits) {
  auto reqs = workload();
  reqs.resize(2);
  const RunResult gen = run(target_, exec("generate"), reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    engine::Request score;
    score.prompt = reqs[i].prompt;
    const auto& toks = gen.traces[i].tokens[0];
    score.prompt.insert(score.prompt.end(), toks.begin(), toks.end());
    score.max_tokens = 0;
    score.prompt_logprobs = 0;
    const RunResult sc = run(target_, exec("score"), {score});
    for (size_t t = 0; t < toks.size(); ++t) {
      const int32_t pos = static_cast<int32_t>(reqs[i].prompt.size() + t);
      const auto& a = gen.traces[i].logits.at({0, pos});
      const auto& b = sc.traces[0].logits.at({0, pos});
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "request " << i << " position " << pos;
      const float lg = gen.traces[i].logprobs[0][t];
      const float ls = sc.traces[0].prompt_logprobs[pos - 1].logprob;
      ASSERT_EQ(0, std::memcmp(&lg, &ls, 4)) << "logprob at position " << pos;
    }
  }
}

// Speculative decoding (docs/speculative.md) on the real model: repetitive prompts, which a
// trained model continues by copying, so n-gram drafts are accepted; tokens, logprobs, top
// logprobs and logits the same bits as without speculation, whole and chunked; on a backend
// with graphs, verify steps replayed from them.
TEST_F(DefaultModelConformance, SpeculativeDecodingChangesNoBit) {
  auto reqs = repetitive_workload(31, model_->config.vocab_size, 3);
  for (auto& r : reqs) r.max_tokens = std::min(r.max_tokens, 16);
  const RunResult ref = run(target_, exec("no speculation"), reqs);
  for (const int32_t chunk : {0, 3}) {
    Execution e = exec("ngram K=4, chunk " + std::to_string(chunk));
    e.engine.speculative.method = engine::SpeculativeMethod::kNgram;
    e.engine.speculative.num_speculative_tokens = 4;
    e.engine.speculative.prompt_lookup_min = 1;  // short outputs: match from one token on
    e.engine.speculative.prompt_lookup_max = 4;
    e.engine.scheduler.chunk_size = chunk;
    const RunResult got = run(target_, e, reqs);
    expect_same(ref, got, e.label);
    EXPECT_GT(got.engine_stats.n_accepted_draft_tokens, 0) << e.label << ": no draft accepted";
    if (chunk == 0) {  // (chunks add prefill steps)
      EXPECT_LT(got.n_steps, ref.n_steps) << e.label;
    }
    // A backend with graphs (CUDA: graphs on by default) verifies windows as decode rows and
    // replays those steps from the decode graphs (docs/speculative.md).
    if (got.graphs_available && chunk == 0) {
      EXPECT_GT(got.engine_stats.n_window_row_steps_replayed, 0) << e.label;
    }
  }
}

}  // namespace
}  // namespace detllm::conformance
