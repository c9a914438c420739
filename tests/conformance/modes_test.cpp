// The determinism modes (determinism/modes.h) on the CPU: names and the policy, the mapping of
// each mode to backend numerics and execution constraints, the scheduler's isolated prefill
// (the padded mode: a prefill step holds one whole prompt and nothing else) and the fixed
// decode shape of model/step_padding.h.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "determinism/modes.h"
#include "engine/engine_config.h"
#include "engine/scheduler.h"
#include "model/step_padding.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

TEST(DeterminismModes, NamesParseAndPrint) {
  std::set<std::string_view> names;
  for (DeterminismMode m : kAllDeterminismModes) {
    names.insert(determinism_mode_name(m));
    EXPECT_EQ(parse_determinism_mode(determinism_mode_name(m)), m);
  }
  EXPECT_EQ(names,
            (std::set<std::string_view>{"fast", "invariant", "bi-naive", "padded", "verified"}));
  EXPECT_THROW(parse_determinism_mode("bi_naive"), Error);
  EXPECT_THROW(parse_determinism_mode(""), Error);
}

TEST(DeterminismModes, PolicyPerMode) {
  for (DeterminismMode m : kAllDeterminismModes) {
    const DeterminismPolicy p = policy_for_mode(m);
    EXPECT_EQ(p.mode, m);
    EXPECT_NE(p.describe().find(std::string("mode=") + std::string(determinism_mode_name(m))),
              std::string::npos);
    EXPECT_NO_THROW(p.validate()) << determinism_mode_name(m);
    // Mixed traffic: the requests that are not deterministic run fast in every mode.
    EXPECT_EQ(p.default_mode, NumericsMode::kFast) << determinism_mode_name(m);
  }
  // The default policy is unchanged; fast numerics for deterministic requests stay refused
  // outside the modes that run library kernels by choice.
  DeterminismPolicy p;
  EXPECT_EQ(p.mode, DeterminismMode::kInvariant);
  p.deterministic_mode = NumericsMode::kFast;
  EXPECT_THROW(p.validate(), Error);
  DeterminismPolicy padded = policy_for_mode(DeterminismMode::kPadded);
  padded.deterministic_mode = NumericsMode::kInvariant;
  EXPECT_THROW(padded.validate(), Error);
  // verified: deterministic requests verified on the invariant path, the others fast.
  const DeterminismPolicy verified = policy_for_mode(DeterminismMode::kVerified);
  EXPECT_EQ(verified.deterministic_mode, NumericsMode::kInvariant);
  EXPECT_EQ(verified.default_mode, NumericsMode::kFast);
  EXPECT_TRUE(verified.self_check);
  DeterminismPolicy bad = verified;
  bad.default_mode = NumericsMode::kInvariant;
  EXPECT_THROW(bad.validate(), Error);
  // Fingerprint names: the default modes keep theirs, the others get their own.
  EXPECT_EQ(fingerprint_mode_name(DeterminismPolicy{}, true), "invariant");
  EXPECT_EQ(fingerprint_mode_name(policy_for_mode(DeterminismMode::kFast), true), "fast");
  EXPECT_EQ(fingerprint_mode_name(policy_for_mode(DeterminismMode::kBiNaive), true), "bi-naive");
  EXPECT_EQ(fingerprint_mode_name(policy_for_mode(DeterminismMode::kPadded), true), "padded");
}

TEST(DeterminismModes, MappingToBackendAndEngine) {
  const ModeInfo& bi = mode_info(DeterminismMode::kBiNaive);
  EXPECT_EQ(bi.backend.numerics, NumericsMode::kInvariant);
  EXPECT_TRUE(bi.backend.gemm_fixed_tile);
  EXPECT_FALSE(bi.backend.gemm_lt);
  EXPECT_EQ(mode_info(DeterminismMode::kFast).backend.numerics, NumericsMode::kFast);
  EXPECT_EQ(mode_info(DeterminismMode::kPadded).backend.numerics, NumericsMode::kFast);
  EXPECT_TRUE(mode_info(DeterminismMode::kInvariant).backend.gemm_lt);
  EXPECT_EQ(mode_info(DeterminismMode::kVerified).backend.numerics, NumericsMode::kInvariant);

  engine::EngineConfig c;
  c.scheduler.max_seqs = 12;
  apply_mode(DeterminismMode::kPadded, c);
  EXPECT_TRUE(mode_info(DeterminismMode::kPadded).isolate_prefill);  // per request (engine)
  EXPECT_TRUE(c.scheduler.kv.enable_prefix_cache);                   // the others keep it
  EXPECT_EQ(c.decode_fixed_rows, 12);
  EXPECT_EQ(c.cuda_graphs, GraphMode::kOn);
  EXPECT_EQ(c.policy.mode, DeterminismMode::kPadded);
  EXPECT_FALSE(c.policy.self_check);  // library kernels: nothing to verify
  apply_mode(DeterminismMode::kInvariant, c);
  EXPECT_FALSE(mode_info(DeterminismMode::kInvariant).isolate_prefill);
  EXPECT_EQ(c.decode_fixed_rows, 0);
  EXPECT_EQ(c.policy.deterministic_mode, NumericsMode::kInvariant);
  engine::EngineConfig v;
  apply_mode(DeterminismMode::kVerified, v);
  EXPECT_EQ(v.policy.mode, DeterminismMode::kVerified);
  EXPECT_TRUE(v.scheduler.kv.enable_prefix_cache);  // kept on
  EXPECT_FALSE(mode_info(DeterminismMode::kVerified).isolate_prefill);
  EXPECT_EQ(v.decode_fixed_rows, 0);
}

// The device backends' default max_seqs (serve, bench and the C++ API on cuda, when no
// --max-seqs is given) is a decode row bucket, so decode steps of that many rows replay a
// captured graph, and every mode's engine config accepts it (the padded mode pads to it); the
// host default stays SchedulerConfig's.
TEST(DeterminismModes, DeviceDefaultMaxSeqsIsADecodeBucketEveryModeAccepts) {
  EXPECT_EQ(engine::default_max_seqs(false), engine::SchedulerConfig{}.max_seqs);
  const int32_t device = engine::default_max_seqs(true);
  EXPECT_GT(device, engine::default_max_seqs(false));
  EXPECT_EQ(row_bucket(device), device);
  EXPECT_LE(device, decode_row_buckets().back());
  const ModelConfig model = synthetic_config("llama-3.1-8b");
  for (DeterminismMode m : kAllDeterminismModes) {
    engine::EngineConfig c;
    c.scheduler.max_seqs = device;
    apply_mode(m, c);
    EXPECT_NO_THROW((void)c.resolved(model)) << determinism_mode_name(m);
  }
}

// Isolated sequences (the padded mode's deterministic requests) among others, under a chunk
// size and budget that chunk and mix the others, with preemption and a shared prefix: an
// isolated sequence's rows only ever run alone and whole (a prefill, never a cache hit) or in
// a decode-only step; the others are chunked, batched and served from the cache around them.
TEST(DeterminismModes, SchedulerIsolatesWholePrefills) {
  for (int32_t n_blocks : {64, 12}) {
    for (int every : {1, 2, 3}) {  // every k-th sequence isolated: all, half, a third
      SCOPED_TRACE(::testing::Message() << "n_blocks " << n_blocks << " every " << every);
      engine::SchedulerConfig sc;
      sc.kv.block_size = 4;
      sc.kv.n_blocks = n_blocks;
      sc.max_tokens_per_step = 8;
      sc.chunk_size = 3;
      sc.max_seqs = 4;
      engine::Scheduler s(sc);
      std::mt19937 rng(5);
      const std::vector<int32_t> shared = {9, 8, 7, 6, 5, 4, 3, 2};  // two full blocks
      std::set<engine::SeqId> isolated;
      for (int i = 0; i < 9; ++i) {
        std::vector<int32_t> prompt = shared;
        prompt.resize(shared.size() + 5 + rng() % 12);
        for (size_t t = shared.size(); t < prompt.size(); ++t)
          prompt[t] = static_cast<int32_t>(rng() % 100);
        engine::SequenceOptions o;
        o.max_new_tokens = 6;
        o.isolated = i % every == 0;
        const engine::SeqId id = s.add(prompt, o);
        if (o.isolated) isolated.insert(id);
      }
      int n_isolated_prefill = 0, n_decode = 0, n_others_chunked = 0;
      int64_t others_cached = 0;
      for (int step = 0; step < 1000 && s.has_unfinished(); ++step) {
        const engine::StepPlan plan = s.schedule();
        s.check_consistency();
        if (plan.empty()) continue;
        bool decode_only = true, has_isolated = false;
        for (const auto& ss : plan.seqs) {
          decode_only = decode_only && ss.n_tokens == 1;
          has_isolated = has_isolated || isolated.count(ss.id) != 0;
        }
        if (has_isolated && !decode_only) {
          ASSERT_EQ(plan.n_seqs(), 1) << "an isolated prefill step holds other sequences";
          const auto& ss = plan.seqs[0];
          EXPECT_EQ(ss.first_pos, 0) << "an isolated prefill started from a cache hit";
          EXPECT_EQ(ss.first_pos + ss.n_tokens, s.sequence(ss.id).n_tokens())
              << "an isolated prefill step does not hold the whole prompt";
          EXPECT_TRUE(ss.sample);
          ++n_isolated_prefill;
        } else if (has_isolated) {
          ++n_decode;
          EXPECT_LE(plan.n_seqs(), sc.max_seqs);
        } else {
          for (const auto& ss : plan.seqs) {
            n_others_chunked += ss.n_tokens > 1 && !ss.sample;
            if (ss.first_pos > 0 && ss.first_pos == s.sequence(ss.id).n_cached_tokens &&
                s.sequence(ss.id).n_generated() == 0)
              others_cached += 1;
          }
        }
        s.complete_step(plan);
        s.check_consistency();
        for (const auto& ss : plan.seqs) {
          if (!ss.sample || !s.contains(ss.id)) continue;
          const engine::Sequence& q = s.sequence(ss.id);
          if (q.n_generated() >= q.options.max_new_tokens) {
            s.finish(ss.id);
          } else {
            s.append_token(ss.id, 7);
          }
        }
      }
      EXPECT_FALSE(s.has_unfinished());
      EXPECT_GE(n_isolated_prefill, static_cast<int>(isolated.size()));
      EXPECT_GT(n_decode, 0);
      if (every > 1) {
        EXPECT_GT(n_others_chunked, 0) << "the other sequences were not chunked";
      }
      if (every > 1 && n_blocks == 64) {
        EXPECT_GT(others_cached, 0) << "no cache hit for the other sequences";
      }
    }
  }
}

TEST(DeterminismModes, FixedDecodeShape) {
  const DecodePadding fixed{GraphMode::kOn, 8};
  EXPECT_EQ(pad_slots_needed(fixed, false), max_pad_rows());  // steps without it: buckets
  EXPECT_EQ(pad_slots_needed(DecodePadding{GraphMode::kOn, 0}, false), max_pad_rows());
  EXPECT_EQ(pad_slots_needed(DecodePadding{GraphMode::kAuto, 8}, false), 0);  // CPU: eager
  EXPECT_EQ(pad_slots_needed(DecodePadding{GraphMode::kAuto, 300}, true), 299);
  for (int32_t n : {1, 3, 5, 8}) {  // every decode step runs at the same 8 rows
    std::vector<int32_t> pos(n, 3), seq(n), slots(n), tables(n, 0);
    for (int32_t i = 0; i < n; ++i) seq[i] = slots[i] = i;
    kernels::StepBatch b;
    b.n_tokens = b.n_seqs = n;
    b.positions = pos.data();
    b.seq_of_token = seq.data();
    b.slots = slots.data();
    b.max_blocks = 1;
    b.block_tables = tables.data();
    const auto key = plan_padded_step(b, fixed, false, pad_slots_needed(fixed, false));
    ASSERT_TRUE(key.has_value()) << n;
    EXPECT_EQ(key->rows, 8);
    // Buckets would have given another shape for most n.
    EXPECT_EQ(plan_padded_step(b, GraphMode::kOn, false, max_pad_rows())->rows, row_bucket(n));
    PaddedStep st;
    std::vector<int32_t> toks(n, 1), rows = {0};
    pad_step(*key, toks, b, rows, /*pad_block=*/10, /*block_size=*/4, st);
    EXPECT_EQ(st.tokens().size(), 8u);
  }
  // More rows than the fixed shape, or too few pad slots: run as it is.
  std::vector<int32_t> nine(9, 0);
  kernels::StepBatch b;
  b.n_tokens = b.n_seqs = 9;
  b.positions = b.seq_of_token = b.slots = b.block_tables = nine.data();
  b.max_blocks = 1;
  EXPECT_FALSE(plan_padded_step(b, fixed, false, 100).has_value());
  b.n_tokens = b.n_seqs = 2;
  EXPECT_FALSE(plan_padded_step(b, fixed, false, 5).has_value());
}

}  // namespace
}  // namespace detllm
