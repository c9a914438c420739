// The execution variations a feature's requests (penalties, grammars) are checked under, on
// any backend: each request alone (V1), staggered arrival (V2), chunked prefill (V3), a pool
// small enough to preempt (V6), shuffled pages (V7), one CPU thread (V11, host backends), CUDA
// graphs off (V8, device backends) and host sampling — every deterministic request's tokens,
// logprobs and logits the same bits as in `ref` (the batch run). Used by
// tests/conformance/penalties_test.cpp, tests/structured/constrained_conformance_test.cpp and
// tests/cuda/cuda_constrained_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "verify/conformance.h"

namespace detllm::conformance {

struct VariationOptions {
  bool cpu_threads = true;   // V11: one thread (host backends)
  bool graphs_off = false;   // V8: decode steps without CUDA graphs (device backends)
  int32_t small_pool_blocks = 20;  // V6: the KV pool, in blocks of the base config (4 tokens)
};

inline void expect_same_under_variations(const Target& target,
                                         const std::vector<engine::Request>& reqs,
                                         const RunResult& ref, const VariationOptions& o = {}) {
  auto expect_same = [&](const RunResult& got, const std::string& what) {
    const auto m = first_mismatch(reqs, ref.traces, got.traces);
    EXPECT_FALSE(m.has_value()) << what << ": " << m->what;
  };
  EXPECT_GT(ref.n_shared_steps, 0) << "the batch run never shared a step";
  for (size_t i = 0; i < reqs.size(); ++i) {  // V1: each request alone
    const RunResult alone = run(target, base_execution("alone"), {reqs[i]});
    const auto m = compare(ref.traces[i], alone.traces[0]);
    EXPECT_FALSE(m.has_value()) << "request " << i << " alone: " << m->what;
  }
  Execution staggered = base_execution("staggered");
  for (size_t i = 0; i < reqs.size(); ++i) staggered.arrival.push_back(static_cast<int32_t>(3 * i));
  expect_same(run(target, staggered, reqs), "V2 staggered arrival");
  Execution chunked = base_execution("chunked");
  chunked.engine.scheduler.chunk_size = 7;
  expect_same(run(target, chunked, reqs), "V3 chunks of 7");
  Execution small = base_execution("preempting");
  small.engine.scheduler.kv.n_blocks = o.small_pool_blocks;
  const RunResult preempted = run(target, small, reqs);
  EXPECT_GT(preempted.n_preemptions, 0) << "the small pool never preempted";
  expect_same(preempted, "V6 preemption + recompute");
  Execution shuffled = base_execution("shuffled pages");
  shuffled.engine.scheduler.kv.shuffle_blocks = true;
  shuffled.engine.scheduler.kv.shuffle_seed = 3;
  expect_same(run(target, shuffled, reqs), "V7 shuffled pages");
  if (o.cpu_threads) expect_same(run(target, base_execution("1 thread", 1), reqs), "V11 one thread");
  if (o.graphs_off) {
    Execution eager = base_execution("no graphs");
    eager.engine.cuda_graphs = GraphMode::kOff;
    expect_same(run(target, eager, reqs), "V8 graphs off");
  }
  Execution host = base_execution("host sampling");
  host.engine.host_sampling = true;
  expect_same(run(target, host, reqs), "host sampling");
}

}  // namespace detllm::conformance
