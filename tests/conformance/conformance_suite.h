// The determinism conformance suite (design.md V1–V10, V8 included), shared by every backend: each
// test binary includes this header once, defines suite_make_ops / suite_backend_available for its
// backend, and instantiates the suite (tests/conformance: CPU; tests/cuda: the GPU). Every
// deterministic request's fp32 logits at every output position, its tokens and logprobs are
// compared bit for bit between executions that differ in one variation — and, in the property
// test, in many at once — and with speculative decoding on — on three synthetic tiny models (GQA + tied embeddings, qkv bias,
// q/k norm), each also with its matrices held as GGUF blocks ("tiny-llama@q4_1": Q4_1, Q8_0
// or Q4_0, quantized by core/quant.h; the k-quants need rows of 256 and the tiny models have
// 64), and with FP8 projections ("tiny-qwen3@fp8": model/fp8_weights.h, activations rounded
// per token; "tiny-qwen3-moe@fp8g": FP8 experts in 128x128 blocks, activations per token and
// 128 columns). Backend-specific checks (V11 threads on the CPU) live in the including file.
// A "#tpN" suffix runs the whole suite on a tensor-parallel group of N ranks as threads
// (model/tp_group.h; CPU ranks, or CUDA ranks on one GPU): the Target's model is the group's
// leader, and TpDegreeIsNotANumerics compares it with TP 1.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "core/quant.h"
#include "model/fp8_weights.h"
#include "model/synthetic.h"
#include "model/tp_group.h"
#include "conformance/speculation_checks.h"
#include "verify/conformance.h"

namespace detllm::conformance {

// Defined once by the including test binary: the backend under test.
std::unique_ptr<kernels::Ops> suite_make_ops(int n_threads);
// False (with the reason) when the backend cannot run here, e.g. no GPU: the suite skips.
bool suite_backend_available(std::string* why);

namespace {

// Every matrix of w (embeddings, projections, lm_head) held as block type `name` ("q4_1", …),
// or "fp8": the projections (experts included) as per-channel FP8 rows (--quantization fp8);
// "fp8g": as 128x128-block rows with activations per token and 128 columns (transformers' fp8).
inline void quantize_matrices(ModelWeights& w, const ModelConfig& c, const std::string& name) {
  if (const std::optional<Fp8Rows> rows = fp8_rows_named(name)) {
    return quantize_weights_fp8(w, c, *rows);
  }
  DType t = DType::kF32;
  for (DType d : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0})
    if (dtype_name(d) == name) t = d;
  if (t == DType::kF32) throw std::invalid_argument("unknown block type " + name);
  auto q = [t](HostTensor& h) {
    if (h.empty()) return;
    h.raw.resize(static_cast<size_t>(dtype_row_bytes(t, h.numel())));
    quantize_row(t, h.data.data(), h.raw.data(), h.numel());
    h.data.clear();
    h.dtype = t;
  };
  q(w.tok_embd);
  q(w.lm_head.w);
  for (auto& l : w.layers)
    for (Linear* m : l.matrices()) q(m->w);
}

Execution exec(std::string label, int n_threads = 2) {
  return base_execution(std::move(label), n_threads);
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!suite_backend_available(&why)) GTEST_SKIP() << why;
    // "model[@block type][+numerics]": a "+..." suffix names a numerics class that the
    // including file's suite_make_ops reads from the test's parameter (CPU: "+q8").
    const std::string param = GetParam().substr(0, GetParam().find_first_of("+#"));
    const size_t at = param.find('@');
    config_ = synthetic_config(param.substr(0, at));
    weights_ = make_synthetic_weights(config_, 42);
    if (at != std::string::npos) block_type_ = param.substr(at + 1);
    if (!block_type_.empty()) quantize_matrices(weights_, config_, block_type_);
    target_.name = GetParam();
    target_.config = &config_;
    target_.weights = &weights_;
    target_.make_ops = [](int n) { return suite_make_ops(n); };
    if (const size_t tp = GetParam().find("#tp"); tp != std::string::npos) {
      tp_group_ = std::make_unique<TpGroup>(config_, weights_, std::stoi(GetParam().substr(tp + 3)),
                                            [] { return suite_make_ops(1); });
      target_.weights = nullptr;
      target_.shared_model = [this]() -> LlamaModel& { return tp_group_->leader(); };
    }
  }
  WorkloadSpec spec(int n_requests) const {
    WorkloadSpec s;
    s.n_requests = n_requests;
    s.vocab_size = config_.vocab_size;
    return s;
  }
  // Each request run alone, in a fresh engine: the reference every variation must reproduce.
  std::vector<RequestTrace> alone(const std::vector<engine::Request>& reqs) {
    std::vector<RequestTrace> out;
    for (const auto& r : reqs) {
      Execution e = exec("alone");
      out.push_back(run(target_, e, {r}).traces.at(0));
    }
    return out;
  }
  // Compares the deterministic requests of `got` with `ref`; reports the first mismatch.
  void expect_same(const std::vector<engine::Request>& reqs, const std::vector<RequestTrace>& ref,
                   const RunResult& got, const std::string& context) {
    const auto m = first_mismatch(reqs, ref, got.traces);
    ASSERT_FALSE(m.has_value()) << context << ": " << m->what;
  }

  // The run shows, from its own statistics, that the variation happened (not_exercised).
  void expect_exercised(const Expect& want, const std::vector<engine::Request>& reqs,
                        const RunResult& got, const std::string& context,
                        const std::vector<RequestTrace>* ref = nullptr) {
    const auto why = not_exercised(want, reqs, got, ref);
    EXPECT_FALSE(why.has_value()) << context << ": the variation did not happen: " << *why;
  }

  ModelConfig config_;
  ModelWeights weights_;
  std::string block_type_;  // "" (fp32) or the block type the matrices are held in
  std::unique_ptr<TpGroup> tp_group_;  // "#tpN" parameters: the group the Target runs on
  Target target_;
};

// V1: alone vs with 1…N random neighbours in the same steps.
TEST_P(Conformance, V1_BatchComposition) {
  for (uint64_t seed : {1, 2}) {
    auto reqs = random_workload(seed, spec(7));
    const auto ref = alone(reqs);
    for (size_t k = 1; k < reqs.size(); ++k) {  // the first request with k neighbours
      std::vector<engine::Request> sub(reqs.begin(), reqs.begin() + k + 1);
      Execution e = exec("neighbours");
      const std::string what =
          "seed " + std::to_string(seed) + ", " + std::to_string(k) + " neighbours";
      const RunResult got = run(target_, e, sub);
      expect_same(sub, ref, got, what);
      Expect want;
      want.requests_in_step = static_cast<int32_t>(sub.size());  // all in the first step
      expect_exercised(want, sub, got, what);
      size_t n_prompt = 0;  // the first step holds every prompt, whole: the largest step
      for (const auto& r : sub) n_prompt += r.prompt.size();
      EXPECT_EQ(got.max_tokens_in_step, static_cast<int64_t>(n_prompt)) << what;
    }
  }
}

// V2: shuffled arrival order and staggered arrival steps.
TEST_P(Conformance, V2_ArrivalOrder) {
  auto reqs = random_workload(3, spec(8));
  const auto ref = alone(reqs);
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    Execution e = exec("arrival");
    e.add_order.resize(reqs.size());
    std::iota(e.add_order.begin(), e.add_order.end(), 0);
    std::shuffle(e.add_order.begin(), e.add_order.end(), rng);
    for (size_t i = 0; i < reqs.size(); ++i) e.arrival.push_back(static_cast<int32_t>(rng() % 9));
    const RunResult got = run(target_, e, reqs);
    expect_same(reqs, ref, got, "arrival round " + std::to_string(round));
    Expect want;
    want.requests_in_step = 2;  // staggered, and still sharing steps
    expect_exercised(want, reqs, got, "arrival round " + std::to_string(round));
  }
}

// V3: chunked prefill with chunk sizes 1, 7, 16, 64 and whole, under small step budgets.
TEST_P(Conformance, V3_Chunking) {
  WorkloadSpec s = spec(5);
  s.max_prompt = 90;
  auto reqs = random_workload(4, s);
  // The first prompt is longer than the largest chunk, so that every chunk size is reached
  // (not_exercised checks it: the random prompts alone stayed under 64).
  for (int32_t i = 0; reqs[0].prompt.size() < 90; ++i) {
    reqs[0].prompt.push_back((i * 37 + 11) % config_.vocab_size);
  }
  const auto ref = alone(reqs);
  for (int32_t chunk : {1, 7, 16, 64, 0}) {
    Execution e = exec("chunk");
    e.engine.scheduler.chunk_size = chunk;
    e.engine.scheduler.max_tokens_per_step = chunk == 0 ? 4096 : std::max(chunk, 20);
    const RunResult got = run(target_, e, reqs);
    expect_same(reqs, ref, got, "chunk " + std::to_string(chunk));
    Expect want;
    want.chunk_size = chunk;
    expect_exercised(want, reqs, got, "chunk " + std::to_string(chunk));
  }
}

// V4: the logits a token was generated with == the logits of scoring the finished sequence;
// the generation logprobs == the scoring (teacher-forcing) logprobs.
TEST_P(Conformance, V4_GenerationVsScoring) {
  WorkloadSpec s = spec(6);
  s.scoring_share = 0;
  s.max_new_tokens = 16;
  auto reqs = random_workload(5, s);
  Execution e = exec("generate");
  const RunResult gen = run(target_, e, reqs);
  std::vector<engine::Request> scoring;
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (size_t k = 0; k < gen.traces[i].tokens.size(); ++k) {
      engine::Request r;
      r.prompt = reqs[i].prompt;
      const auto& toks = gen.traces[i].tokens[k];
      r.prompt.insert(r.prompt.end(), toks.begin(), toks.end());
      r.max_tokens = 0;
      r.prompt_logprobs = 0;
      scoring.push_back(r);
    }
  }
  Execution se = exec("score");
  se.engine.scheduler.chunk_size = 5;  // scoring chunked differently from generation
  se.engine.scheduler.max_tokens_per_step = 24;
  const RunResult sc = run(target_, se, scoring);
  size_t j = 0, n_compared = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int32_t n_prompt = static_cast<int32_t>(reqs[i].prompt.size());
    for (size_t k = 0; k < gen.traces[i].tokens.size(); ++k, ++j) {
      const auto& toks = gen.traces[i].tokens[k];
      const RequestTrace& st = sc.traces[j];
      ASSERT_EQ(st.prompt_logprobs.size(), reqs[i].prompt.size() + toks.size() - 1);
      for (size_t t = 0; t < toks.size(); ++t) {
        const int32_t pos = n_prompt + static_cast<int32_t>(t);
        const auto& lg = gen.traces[i].logits.at({static_cast<int32_t>(k), pos});
        const auto& ls = st.logits.at({0, pos});
        ASSERT_EQ(0, std::memcmp(lg.data(), ls.data(), lg.size() * 4))
            << "request " << i << " sample " << k << " position " << pos;
        const float lp_gen = gen.traces[i].logprobs[k][t];
        const float lp_score = st.prompt_logprobs[pos - 1].logprob;
        ASSERT_EQ(0, std::memcmp(&lp_gen, &lp_score, 4)) << "logprob at position " << pos;
        ++n_compared;
      }
    }
  }
  EXPECT_GT(n_compared, 20u);
}

// V5: prefix cache cold (off), warm (the same prompts ran before) and partial (prompts that
// share only a prefix ran before).
TEST_P(Conformance, V5_PrefixCache) {
  auto reqs = random_workload(6, spec(8));
  Execution cold = exec("cache off");
  cold.engine.scheduler.kv.enable_prefix_cache = false;
  const RunResult ref = run(target_, cold, reqs);
  std::vector<RequestTrace> ref_traces = ref.traces;
  Expect none;
  none.no_hit = true;
  expect_exercised(none, reqs, ref, "cache off");

  Execution warm = exec("warm");
  warm.warmup = reqs;
  const RunResult w = run(target_, warm, reqs);
  expect_same(reqs, ref_traces, w, "warm cache");
  Expect full;
  full.full_hit = true;
  expect_exercised(full, reqs, w, "warm cache");

  Execution partial = exec("partial");
  partial.warmup = partial_prefix_warmup(reqs);  // same prompts cut in the middle of a block
  const RunResult p = run(target_, partial, reqs);
  expect_same(reqs, ref_traces, p, "partial prefix hits");
  Expect part;
  part.partial_hit = true;
  expect_exercised(part, reqs, p, "partial prefix hits");
}

// V6: a KV pool so small that sequences are preempted, their KV freed and recomputed.
TEST_P(Conformance, V6_PreemptionAndRecompute) {
  WorkloadSpec s = spec(8);
  s.max_prompt = 30;
  s.max_new_tokens = 16;
  auto reqs = random_workload(8, s);
  const auto ref = alone(reqs);
  Execution e = exec("tiny KV");
  e.engine.kv_cache_tokens = 0;
  e.engine.scheduler.kv.n_blocks = 14;  // 56 tokens: the longest request fits alone, not all
  const RunResult got = run(target_, e, reqs);
  Expect want;
  want.preemption = true;
  expect_exercised(want, reqs, got, "14-block KV pool");
  expect_same(reqs, ref, got, "preemption");
}

// V7: physical KV page layout — blocks taken in shuffled orders, after a warm-up that leaves
// the pool fragmented.
TEST_P(Conformance, V7_PageLayout) {
  auto reqs = random_workload(9, spec(6));
  const auto ref = alone(reqs);
  for (uint64_t shuffle : {1, 2, 3}) {
    Execution e = exec("shuffled blocks");
    e.engine.scheduler.kv.shuffle_blocks = true;
    e.engine.scheduler.kv.shuffle_seed = shuffle;
    e.warmup = random_workload(100 + shuffle, spec(4));
    const RunResult got = run(target_, e, reqs);
    expect_same(reqs, ref, got, "shuffle " + std::to_string(shuffle));
    Expect want;
    want.other_layout = true;
    expect_exercised(want, reqs, got, "shuffle " + std::to_string(shuffle), &ref);
  }
}

// V8: decode steps padded to batch-size buckets and replayed as CUDA graphs, or run as they
// are. On a backend without graphs (CPU) kOn still pads: pad rows must not change real rows.
TEST_P(Conformance, V8_GraphsAndPadding) {
  WorkloadSpec s = spec(7);
  s.max_new_tokens = 16;
  auto reqs = random_workload(13, s);
  Execution off = exec("graphs off");
  off.engine.cuda_graphs = GraphMode::kOff;
  const RunResult ref = run(target_, off, reqs);
  EXPECT_EQ(ref.n_padded_steps, 0);
  // The model the target runs: a tensor-parallel group of several ranks has none (its
  // exchange is a host rendezvous: LlamaModel::graph_capture), so kAuto does not pad there;
  // nor has a mixture-of-experts model (its groups are formed on the host every layer).
  const bool has_graphs = tp_group_ ? tp_group_->leader().graph_capture() != nullptr
                                    : target_.make_ops(1)->graph_capture() != nullptr &&
                                          !config_.moe.active();
  std::mt19937 rng(8);
  for (int round = 0; round < 3; ++round) {
    Execution on = exec("graphs on");
    on.engine.cuda_graphs = round == 2 ? GraphMode::kAuto : GraphMode::kOn;
    on.engine.scheduler.max_seqs = 3 + round * 2;  // 3 rows in bucket 4, 5 in 8, 7 in 8
    on.add_order.resize(reqs.size());              // rows in other orders
    std::iota(on.add_order.begin(), on.add_order.end(), 0);
    std::shuffle(on.add_order.begin(), on.add_order.end(), rng);
    for (size_t i = 0; i < reqs.size(); ++i) on.arrival.push_back(static_cast<int32_t>(rng() % 5));
    const RunResult got = run(target_, on, reqs);
    const std::string what = "graphs round " + std::to_string(round);
    expect_same(reqs, ref.traces, got, what);
    Expect want;  // kAuto pads (and replays) only on a backend with graphs
    want.padded = on.engine.cuda_graphs == GraphMode::kOn || has_graphs;
    want.graph_replays = has_graphs;
    expect_exercised(want, reqs, got, what);
  }
}

// V9: a fresh engine, backend and weight copy (as after a restart) reproduce the bits.
TEST_P(Conformance, V9_FreshEngine) {
  auto reqs = random_workload(10, spec(6));
  Execution e = exec("first");
  const RunResult a = run(target_, e, reqs);
  ModelWeights reloaded = make_synthetic_weights(config_, 42);  // new memory, same bits
  if (!block_type_.empty()) quantize_matrices(reloaded, config_, block_type_);
  Target fresh = target_;
  fresh.weights = &reloaded;
  std::unique_ptr<TpGroup> fresh_group;  // "#tpN": a new group on the reloaded weights
  if (tp_group_) {
    fresh_group = std::make_unique<TpGroup>(config_, reloaded, tp_group_->degree(),
                                            [] { return suite_make_ops(1); });
    fresh.weights = nullptr;
    fresh.shared_model = [&]() -> LlamaModel& { return fresh_group->leader(); };
  }
  const RunResult b = run(fresh, e, reqs);
  expect_same(reqs, a.traces, b, "fresh engine");
}

// V10: non-deterministic neighbours (other sampling, deterministic=false) change nothing.
TEST_P(Conformance, V10_NondeterministicNeighbours) {
  WorkloadSpec s = spec(10);
  s.nondet_share = 0.5;
  auto reqs = random_workload(11, s);
  const auto ref = alone(reqs);
  Execution e = exec("mixed");
  const RunResult got = run(target_, e, reqs);
  expect_same(reqs, ref, got, "with non-deterministic neighbours");
  Expect want;
  want.requests_in_step = static_cast<int32_t>(reqs.size());  // all in the first step
  expect_exercised(want, reqs, got, "with non-deterministic neighbours");
}

// Speculative decoding (exact acceptance) on repetitive prompts: the same bits as without it,
// with n-gram drafts at several K, chunked and under preemption, and with the draft-model
// drafter and the adaptive draft length (speculation_checks.h); drafts were proposed, accepted
// and rejected.
TEST_P(Conformance, Speculation_NgramDraftsChangeNoBit) {
  for (uint64_t seed : {21, 22}) {
    const auto reqs = repetitive_workload(seed, config_.vocab_size, 6);
    // The draft-model and adaptive cases on the first workload.
    const SpeculationVerdict v = check_speculation(
        target_, reqs, seed == 21 ? SpeculationCases::kAll : SpeculationCases::kNgram);
    ASSERT_FALSE(v.mismatch.has_value()) << "seed " << seed << ": " << v.mismatch->what;
    EXPECT_FALSE(v.not_exercised.has_value()) << "seed " << seed << ": " << *v.not_exercised;
  }
}

// Property-based: random workloads and random executions mixing every variation at once.
// A failure prints the seed (rerun with it) and the first differing position.
TEST_P(Conformance, Property_RandomWorkloadsAndExecutions) {
  const int rounds = 25;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t seed = 1000 + round;
    std::mt19937_64 rng(seed);
    WorkloadSpec s = spec(3 + static_cast<int>(rng() % 8));
    s.nondet_share = 0.2;
    auto reqs = random_workload(seed, s);
    const auto ref = alone(reqs);
    Execution e = exec("random");
    const int32_t chunks[] = {0, 1, 3, 8, 16};
    e.engine.scheduler.chunk_size = chunks[rng() % 5];
    e.engine.scheduler.max_tokens_per_step = 8 + static_cast<int32_t>(rng() % 64);
    e.engine.scheduler.max_seqs = 1 + static_cast<int32_t>(rng() % 6);
    e.engine.scheduler.kv.enable_prefix_cache = rng() % 4 != 0;
    e.engine.scheduler.kv.shuffle_blocks = rng() % 2;
    e.engine.scheduler.kv.shuffle_seed = rng();
    e.engine.kv_cache_tokens = 0;
    e.engine.scheduler.kv.n_blocks = 30 + static_cast<int32_t>(rng() % 100);
    e.n_threads = 1 + static_cast<int>(rng() % 3);
    for (size_t i = 0; i < reqs.size(); ++i) e.arrival.push_back(static_cast<int32_t>(rng() % 6));
    e.label = "property seed " + std::to_string(seed);
    expect_same(reqs, ref, run(target_, e, reqs), e.label);
    if (HasFatalFailure()) return;
  }
}

// The TP degree as a variation: the "#tpN" parameters' traces equal those of the same model at
// TP 1 with the same canonical chunks (model/tensor_parallel.h), bit for bit.
TEST_P(Conformance, TpDegreeIsNotANumerics) {
  if (!tp_group_) GTEST_SKIP() << "not a tensor-parallel parameter";
  auto reqs = random_workload(13, spec(6));
  const RunResult got = run(target_, exec("tp"), reqs);
  TpGroup one(config_, weights_, 1, [] { return suite_make_ops(1); });
  Target t1 = target_;
  t1.shared_model = [&]() -> LlamaModel& { return one.leader(); };
  expect_same(reqs, got.traces, run(t1, exec("tp 1"), reqs), "TP 1 against TP " +
              std::to_string(tp_group_->degree()));
  EXPECT_GT(tp_group_->degree(), 1);
}

inline std::string suite_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  std::replace(n.begin(), n.end(), '@', '_');
  std::replace(n.begin(), n.end(), '+', '_');
  std::replace(n.begin(), n.end(), '#', '_');
  return n;
}

}  // namespace
}  // namespace detllm::conformance
