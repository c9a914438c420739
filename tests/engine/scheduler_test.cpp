// Tests of the continuous-batching scheduler: the plan's shape (budget, max_seqs, chunking,
// slots, logits rows), prefix-cache skipping, preemption and recompute, fork with copy-on-write,
// rejection of requests that can never fit, and a long seeded random simulation with a fake KV
// store that checks every read sees the KV of the right prefix. No model: milliseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "engine/scheduler.h"
#include "model/step_padding.h"

namespace detllm::engine {
namespace {

SchedulerConfig make_config(int32_t n_blocks, int32_t block_size = 4, int32_t budget = 64,
                            int32_t max_seqs = 8, int32_t chunk = 0) {
  SchedulerConfig c;
  c.kv.n_blocks = n_blocks;
  c.kv.block_size = block_size;
  c.max_tokens_per_step = budget;
  c.max_seqs = max_seqs;
  c.chunk_size = chunk;
  return c;
}

std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

SequenceOptions gen(int32_t max_new) {
  SequenceOptions o;
  o.max_new_tokens = max_new;
  return o;
}

// Checks the plan against the scheduler's state right after schedule(): shape, limits, and that
// every row's slot is the one its block table row maps its position to.
void check_plan(const Scheduler& sch, const StepPlan& plan) {
  const SchedulerConfig& c = sch.config();
  const int32_t bs = c.kv.block_size;
  ASSERT_LE(plan.n_tokens(), c.max_tokens_per_step);
  ASSERT_LE(plan.n_seqs(), c.max_seqs);
  ASSERT_EQ(plan.positions.size(), plan.token_ids.size());
  ASSERT_EQ(plan.seq_of_token.size(), plan.token_ids.size());
  ASSERT_EQ(plan.slots.size(), plan.token_ids.size());
  ASSERT_EQ(plan.block_tables.size(), static_cast<size_t>(plan.n_seqs()) * plan.max_blocks);
  std::set<SeqId> ids;
  std::set<int32_t> slots;
  std::vector<int32_t> expect_logits;
  int32_t row_begin = 0;
  for (int32_t r = 0; r < plan.n_seqs(); ++r) {
    const ScheduledSeq& ss = plan.seqs[r];
    ASSERT_TRUE(ids.insert(ss.id).second) << "sequence scheduled twice";
    const Sequence& s = sch.sequence(ss.id);
    ASSERT_EQ(s.status, SeqStatus::kRunning);
    ASSERT_EQ(ss.first_pos, s.n_computed);
    ASSERT_EQ(ss.n_tokens, s.n_in_flight);
    ASSERT_GE(ss.n_tokens, 1);
    ASSERT_LE(ss.first_pos + ss.n_tokens, s.n_tokens());
    if (c.chunk_size > 0) {
      ASSERT_LE(ss.n_tokens, c.chunk_size);
    }
    ASSERT_EQ(ss.token_begin, row_begin);
    ASSERT_EQ(ss.sample, ss.first_pos + ss.n_tokens == s.n_tokens());
    ASSERT_EQ(ss.all_logits, s.options.all_logits);
    std::span<const int32_t> table = sch.kv_cache().block_table(ss.id);
    const int32_t n_blocks = (ss.first_pos + ss.n_tokens + bs - 1) / bs;
    ASSERT_LE(n_blocks, plan.max_blocks);
    for (int32_t j = 0; j < plan.max_blocks; ++j) {
      ASSERT_EQ(plan.block_tables[r * plan.max_blocks + j], j < n_blocks ? table[j] : -1);
    }
    for (int32_t t = 0; t < ss.n_tokens; ++t) {
      const int32_t row = ss.token_begin + t;
      const int32_t pos = ss.first_pos + t;
      ASSERT_EQ(plan.positions[row], pos);
      ASSERT_EQ(plan.seq_of_token[row], r);
      ASSERT_EQ(plan.token_ids[row], s.tokens[pos]);
      ASSERT_EQ(plan.slots[row], table[pos / bs] * bs + pos % bs) << "slot outside its table";
      ASSERT_TRUE(slots.insert(plan.slots[row]).second) << "two rows write one slot";
      // The written block belongs to this sequence alone.
      ASSERT_EQ(sch.kv_cache().ref_count(table[pos / bs]), 1);
      ASSERT_FALSE(sch.kv_cache().is_cached(table[pos / bs]));
    }
    if (ss.all_logits || ss.sample) {
      ASSERT_EQ(ss.logits_begin, static_cast<int32_t>(expect_logits.size()));
      if (ss.all_logits) {
        for (int32_t t = 0; t < ss.n_tokens; ++t) expect_logits.push_back(ss.token_begin + t);
      } else {
        expect_logits.push_back(ss.token_begin + ss.n_tokens - 1);
      }
    } else {
      ASSERT_EQ(ss.logits_begin, -1);
    }
    row_begin += ss.n_tokens;
  }
  ASSERT_EQ(plan.logit_rows, expect_logits);
  ASSERT_EQ(plan.n_tokens(), row_begin);
  const kernels::StepBatch b = plan.batch();
  ASSERT_EQ(b.n_tokens, plan.n_tokens());
  ASSERT_EQ(b.n_seqs, plan.n_seqs());
  ASSERT_EQ(b.slots, plan.slots.data());
}

TEST(SchedulerConfig, Validate) {
  EXPECT_NO_THROW(make_config(4).validate());
  EXPECT_THROW(make_config(0).validate(), Error);
  EXPECT_THROW(make_config(4, 0).validate(), Error);
  EXPECT_THROW(make_config(4, 4, 0).validate(), Error);
  EXPECT_THROW(make_config(4, 4, 8, 0).validate(), Error);
  EXPECT_THROW(make_config(4, 4, 8, 4, -1).validate(), Error);
  EXPECT_THROW(Scheduler(make_config(4, 4, 0)), Error);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  Scheduler sch(make_config(4));  // 16 token slots
  EXPECT_THROW(sch.add(iota_tokens(10), gen(7)), Error);
  EXPECT_THROW(sch.add(iota_tokens(17), gen(0)), Error);
  EXPECT_THROW(sch.add({}, gen(1)), Error);
  EXPECT_THROW(sch.add(iota_tokens(2), gen(-1)), Error);
  EXPECT_EQ(sch.n_waiting(), 0);
  const SeqId id = sch.add(iota_tokens(10), gen(6));  // exactly fits
  EXPECT_EQ(sch.sequence(id).max_tokens(), 16);
  sch.check_consistency();
}

TEST(Scheduler, PrefillThenDecode) {
  Scheduler sch(make_config(16));
  const SeqId id = sch.add(iota_tokens(10), gen(3));
  StepPlan p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 1);
  EXPECT_EQ(p.seqs[0].first_pos, 0);
  EXPECT_EQ(p.seqs[0].n_tokens, 10);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(p.logit_rows, std::vector<int32_t>{9});
  EXPECT_THROW(sch.schedule(), Error);           // previous plan in flight
  EXPECT_THROW(sch.append_token(id, 1), Error);  // not computed yet
  sch.complete_step(p);
  sch.check_consistency();
  for (int32_t i = 0; i < 3; ++i) {
    sch.append_token(id, 7 + i);
    p = sch.schedule();
    check_plan(sch, p);
    ASSERT_EQ(p.n_seqs(), 1);
    EXPECT_EQ(p.seqs[0].first_pos, 10 + i);
    EXPECT_EQ(p.seqs[0].n_tokens, 1);
    EXPECT_EQ(p.token_ids[0], 7 + i);
    sch.complete_step(p);
    sch.check_consistency();
  }
  EXPECT_THROW(sch.append_token(id, 1), Error);  // max_new_tokens reached
  EXPECT_TRUE(sch.schedule().empty());           // nothing to do until finish
  sch.finish(id);
  sch.check_consistency();
  EXPECT_FALSE(sch.has_unfinished());
  EXPECT_EQ(sch.kv_cache().stats().n_referenced, 0);
  EXPECT_EQ(sch.stats().n_finished, 1);
}

TEST(Scheduler, ChunkedPrefillUnderBudget) {
  Scheduler sch(make_config(32, 4, /*budget=*/6, /*max_seqs=*/8, /*chunk=*/4));
  const SeqId a = sch.add(iota_tokens(10, 100), gen(2));
  const SeqId b = sch.add(iota_tokens(3, 200), gen(2));
  // step 0: a gets a chunk of 4, b the remaining budget 2 (of its 3).
  StepPlan p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 2);
  EXPECT_EQ(p.seqs[0].id, a);
  EXPECT_EQ(p.seqs[0].n_tokens, 4);
  EXPECT_FALSE(p.seqs[0].sample);
  EXPECT_EQ(p.seqs[1].id, b);
  EXPECT_EQ(p.seqs[1].n_tokens, 2);
  EXPECT_TRUE(p.logit_rows.empty());
  sch.complete_step(p);
  // step 1: a 4 more, b its last 1 (sampled).
  p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 2);
  EXPECT_EQ(p.seqs[0].first_pos, 4);
  EXPECT_EQ(p.seqs[0].n_tokens, 4);
  EXPECT_EQ(p.seqs[1].first_pos, 2);
  EXPECT_EQ(p.seqs[1].n_tokens, 1);
  EXPECT_TRUE(p.seqs[1].sample);
  EXPECT_EQ(p.logit_rows, std::vector<int32_t>{4});
  sch.complete_step(p);
  sch.append_token(b, 1);
  // step 2: a's last 2 tokens (sampled) and b's decode token.
  p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 2);
  EXPECT_EQ(p.seqs[0].n_tokens, 2);
  EXPECT_TRUE(p.seqs[0].sample);
  EXPECT_EQ(p.seqs[1].n_tokens, 1);
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{1, 2}));
  sch.complete_step(p);
  sch.check_consistency();
}

TEST(Scheduler, MaxSeqsAndFcfsAdmission) {
  Scheduler sch(make_config(64, 4, 100, /*max_seqs=*/2));
  std::vector<SeqId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(sch.add(iota_tokens(3, 10 * i), gen(1)));
  StepPlan p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 2);
  EXPECT_EQ(p.seqs[0].id, ids[0]);
  EXPECT_EQ(p.seqs[1].id, ids[1]);
  EXPECT_EQ(sch.n_waiting(), 2);
  sch.complete_step(p);
  sch.finish(ids[1]);
  p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 1);  // ids[0] waits for a token; ids[2] is admitted in order
  EXPECT_EQ(p.seqs[0].id, ids[2]);
  sch.complete_step(p);
  sch.check_consistency();
}

TEST(Scheduler, PrefixCacheSkipsComputedTokens) {
  Scheduler sch(make_config(32));
  const auto prompt = iota_tokens(20);
  const SeqId a = sch.add(prompt, gen(0));
  StepPlan p = sch.schedule();
  sch.complete_step(p);
  sch.finish(a);

  auto longer = prompt;
  longer.push_back(5);
  longer.push_back(6);
  const SeqId b = sch.add(longer, gen(0));  // 5 full blocks cached: computes 2 tokens
  const SeqId c = sch.add(prompt, gen(0));  // identical prompt: must leave one block to compute
  SequenceOptions scoring = gen(0);
  scoring.all_logits = true;
  const SeqId d = sch.add(prompt, scoring);  // needs every position's logits: no skipping
  p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 3);
  EXPECT_EQ(p.seqs[0].id, b);
  EXPECT_EQ(p.seqs[0].first_pos, 20);
  EXPECT_EQ(p.seqs[0].n_tokens, 2);
  EXPECT_EQ(sch.sequence(b).n_cached_tokens, 20);
  EXPECT_EQ(p.seqs[1].id, c);
  EXPECT_EQ(p.seqs[1].first_pos, 16);
  EXPECT_EQ(p.seqs[1].n_tokens, 4);
  EXPECT_EQ(p.seqs[2].id, d);
  EXPECT_EQ(p.seqs[2].first_pos, 0);
  EXPECT_EQ(p.seqs[2].n_tokens, 20);
  EXPECT_EQ(p.seqs[2].logits_begin, 2);
  EXPECT_EQ(p.logit_rows.size(), 2u + 20u);
  // Shared prefix blocks appear in both tables.
  EXPECT_EQ(sch.kv_cache().block_table(b)[0], sch.kv_cache().block_table(c)[0]);
  sch.complete_step(p);
  sch.check_consistency();
  EXPECT_GT(sch.kv_cache().stats().hit_rate(), 0.0);
}

TEST(Scheduler, PreemptsNewestAndRecomputesWithSameKeys) {
  // 6 blocks of 4. a: 8 + up to 12 tokens, b: 8 + up to 8. Both decode until the pool is full.
  Scheduler sch(make_config(6, 4, 64, 8));
  const SeqId a = sch.add(iota_tokens(8, 100), gen(12));
  const SeqId b = sch.add(iota_tokens(8, 200), gen(8));
  std::vector<BlockHash> b_keys;
  std::vector<int32_t> b_tokens;
  bool preempted = false;
  int32_t token = 0;
  for (int step = 0; step < 200 && sch.has_unfinished(); ++step) {
    StepPlan p = sch.schedule();
    check_plan(sch, p);
    if (!p.preempted.empty()) {
      ASSERT_FALSE(preempted);
      preempted = true;
      ASSERT_EQ(p.preempted, std::vector<SeqId>{b});  // the most recently admitted
      EXPECT_EQ(sch.sequence(a).status, SeqStatus::kRunning);
      const Sequence& s = sch.sequence(b);
      EXPECT_EQ(s.status, SeqStatus::kWaiting);
      EXPECT_EQ(s.n_computed, 0);
      EXPECT_EQ(s.tokens, b_tokens);  // generated tokens kept for recompute
      EXPECT_EQ(sch.waiting().front(), b);
      EXPECT_GT(s.n_generated(), 0);
    }
    sch.complete_step(p);
    sch.check_consistency();
    if (sch.contains(b) && sch.sequence(b).status == SeqStatus::kRunning) {
      auto keys = sch.kv_cache().block_hashes(b);
      if (!preempted) {
        b_keys.assign(keys.begin(), keys.end());
      } else if (sch.sequence(b).n_computed >= static_cast<int32_t>(b_keys.size()) * 4) {
        // After recompute the chained keys are the same as before preemption.
        ASSERT_GE(keys.size(), b_keys.size());
        EXPECT_TRUE(std::equal(b_keys.begin(), b_keys.end(), keys.begin()));
      }
    }
    for (const ScheduledSeq& ss : p.seqs) {
      if (!ss.sample) continue;
      const Sequence& s = sch.sequence(ss.id);
      if (s.n_generated() == s.options.max_new_tokens) {
        sch.finish(ss.id);
      } else {
        sch.append_token(ss.id, token++ % 5);
        if (ss.id == b) b_tokens = sch.sequence(b).tokens;
      }
      sch.check_consistency();
    }
  }
  EXPECT_TRUE(preempted);
  EXPECT_FALSE(sch.has_unfinished());
  EXPECT_EQ(sch.stats().n_finished, 2);
  EXPECT_GT(sch.kv_cache().stats().n_hit_tokens, 0);  // b reused part of its own prefix
}

TEST(Scheduler, ForkSharesPromptAndCopiesPartialBlock) {
  Scheduler sch(make_config(16));
  const SeqId p0 = sch.add(iota_tokens(6), gen(4));  // block 1 partial (positions 4, 5)
  StepPlan p = sch.schedule();
  sch.complete_step(p);
  EXPECT_THROW(sch.fork(99), Error);
  const SeqId c1 = sch.fork(p0);
  const SeqId c2 = sch.fork(p0);
  sch.check_consistency();
  EXPECT_EQ(sch.sequence(c1).n_computed, 6);
  EXPECT_EQ(sch.sequence(c1).tokens, sch.sequence(p0).tokens);
  EXPECT_EQ(sch.kv_cache().ref_count(sch.kv_cache().block_table(p0)[0]), 3);
  const int32_t shared_partial = sch.kv_cache().block_table(p0)[1];
  sch.append_token(p0, 1);
  sch.append_token(c1, 2);
  sch.append_token(c2, 3);
  p = sch.schedule();
  check_plan(sch, p);
  ASSERT_EQ(p.n_seqs(), 3);
  // Two of the three holders get a copy of the partial block; the last writes in place.
  ASSERT_EQ(p.copies.size(), 2u);
  EXPECT_EQ(p.copies[0].src, shared_partial);
  EXPECT_EQ(p.copies[1].src, shared_partial);
  EXPECT_EQ(sch.kv_cache().block_table(c2)[1], shared_partial);
  sch.complete_step(p);
  sch.check_consistency();
  sch.abort(c1);
  sch.finish(p0);
  sch.finish(c2);
  sch.check_consistency();
  EXPECT_EQ(sch.stats().n_forked, 2);
  EXPECT_EQ(sch.stats().n_aborted, 1);
}

TEST(Scheduler, AbortWhileWaitingAndInFlight) {
  Scheduler sch(make_config(8, 4, 8, 1));
  const SeqId a = sch.add(iota_tokens(5), gen(2));
  const SeqId b = sch.add(iota_tokens(5, 50), gen(2));
  StepPlan p = sch.schedule();
  ASSERT_EQ(p.n_seqs(), 1);
  sch.abort(b);          // waiting
  sch.abort(a);          // in flight
  sch.complete_step(p);  // skips the aborted sequence
  sch.check_consistency();
  EXPECT_FALSE(sch.has_unfinished());
  EXPECT_TRUE(sch.schedule().empty());
}

// ---- long random simulation ----

struct SimOptions {
  uint64_t seed = 1;
  SchedulerConfig config;
  int32_t n_requests = 60;
  int32_t max_prompt = 20;
  int32_t max_new = 12;
};

struct SimResult {
  std::vector<int64_t> trace;  // (step, id, first, n) of every scheduled sequence
  std::vector<int32_t> slots;  // every slot written, in order
  int64_t n_preemptions = 0;
  int64_t n_copies = 0;
  int64_t n_hit_tokens = 0;
  int64_t n_steps = 0;
};

// Fake KV content of position p: a hash of the sequence's tokens [0, p] (sig[p]). A read that
// finds anything else means a slot held another prefix's KV (bad reuse, missed copy, early
// eviction).
std::vector<uint64_t> prefix_signatures(const std::vector<int32_t>& tokens) {
  std::vector<uint64_t> sig(tokens.size());
  uint64_t h = 0x12345;
  for (size_t i = 0; i < tokens.size(); ++i) {
    h = (h ^ static_cast<uint64_t>(tokens[i])) * 0x100000001b3ull;
    sig[i] = h;
  }
  return sig;
}

SimResult simulate(const SimOptions& opt) {
  SimResult res;
  std::mt19937_64 rng(opt.seed);
  auto uniform = [&](int32_t lo, int32_t hi) {  // [lo, hi]
    return static_cast<int32_t>(lo + rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  auto chance = [&](double p) { return static_cast<double>(rng() % 1000000) < p * 1e6; };

  Scheduler sch(opt.config);
  const int32_t bs = opt.config.kv.block_size;
  const int64_t capacity = opt.config.kv.capacity_tokens();
  std::vector<uint64_t> kv(static_cast<size_t>(capacity), 0);
  // A few shared prefixes so that requests hit each other's blocks.
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> b(opt.max_prompt);
    for (auto& t : b) t = uniform(0, 50);
    bases.push_back(b);
  }
  int32_t n_added = 0;
  int32_t n_ended = 0;  // finished or aborted (forks included)
  int32_t n_total = 0;
  for (int64_t step = 0; step < 20000; ++step) {
    // Arrivals.
    while (n_added < opt.n_requests && chance(0.3)) {
      const int32_t n_prompt = uniform(1, opt.max_prompt);
      const std::vector<int32_t>& base = bases[uniform(0, 2)];
      std::vector<int32_t> prompt(base.begin(), base.begin() + n_prompt);
      for (int32_t i = uniform(0, n_prompt); i < n_prompt; ++i) prompt[i] = uniform(0, 50);
      SequenceOptions o;
      o.max_new_tokens =
          std::min<int32_t>(uniform(0, opt.max_new), static_cast<int32_t>(capacity) - n_prompt);
      o.all_logits = chance(0.1);
      o.numerics_class = chance(0.2) ? 1 : 0;
      sch.add(prompt, o);
      ++n_added;
      ++n_total;
    }
    if (n_added == opt.n_requests && !sch.has_unfinished()) break;

    StepPlan plan = sch.schedule();
    check_plan(sch, plan);
    if (::testing::Test::HasFatalFailure()) return res;
    for (const ScheduledSeq& ss : plan.seqs) {
      res.trace.insert(res.trace.end(), {step, ss.id, ss.first_pos, ss.n_tokens});
    }
    // The runner: copies in order, then write this step's KV, then attention reads.
    for (const BlockCopy& c : plan.copies) {
      std::copy_n(kv.begin() + static_cast<ptrdiff_t>(c.src) * bs, bs,
                  kv.begin() + static_cast<ptrdiff_t>(c.dst) * bs);
    }
    res.n_copies += static_cast<int64_t>(plan.copies.size());
    std::vector<std::vector<uint64_t>> sigs;  // per plan row
    for (const ScheduledSeq& ss : plan.seqs)
      sigs.push_back(prefix_signatures(sch.sequence(ss.id).tokens));
    for (int32_t row = 0; row < plan.n_tokens(); ++row) {
      kv[plan.slots[row]] = sigs[plan.seq_of_token[row]][plan.positions[row]];
      res.slots.push_back(plan.slots[row]);
    }
    for (int32_t r = 0; r < plan.n_seqs(); ++r) {
      const ScheduledSeq& ss = plan.seqs[r];
      for (int32_t pos = 0; pos < ss.first_pos + ss.n_tokens; ++pos) {
        const int32_t block = plan.block_tables[r * plan.max_blocks + pos / bs];
        EXPECT_EQ(kv[block * bs + pos % bs], sigs[r][pos])
            << "seq " << ss.id << " reads wrong KV at position " << pos << " (step " << step << ")";
        if (::testing::Test::HasFailure()) return res;
      }
    }
    sch.complete_step(plan);
    sch.check_consistency();

    // The engine: sample, fork, stop.
    for (const ScheduledSeq& ss : plan.seqs) {
      if (!ss.sample || !sch.contains(ss.id)) continue;
      const Sequence& s = sch.sequence(ss.id);
      if (s.n_generated() >= s.options.max_new_tokens || chance(0.05)) {
        sch.finish(ss.id);
        ++n_ended;
        continue;
      }
      if (s.n_generated() == 0 && chance(0.2)) {
        const int32_t n_children = uniform(1, 2);
        for (int32_t i = 0; i < n_children; ++i) {
          const SeqId c = sch.fork(ss.id);
          sch.append_token(c, uniform(0, 3));
          ++n_total;
        }
      }
      sch.append_token(ss.id, uniform(0, 3));
    }
    // Random aborts, of running or waiting sequences.
    if (chance(0.02)) {
      std::vector<SeqId> all(sch.running().begin(), sch.running().end());
      all.insert(all.end(), sch.waiting().begin(), sch.waiting().end());
      if (!all.empty()) {
        sch.abort(all[rng() % all.size()]);
        ++n_ended;
      }
    }
    sch.check_consistency();
    res.n_steps = step + 1;
  }
  EXPECT_FALSE(sch.has_unfinished())
      << "requests starved: " << sch.n_running() << " running, " << sch.n_waiting() << " waiting";
  EXPECT_EQ(n_added, opt.n_requests);
  EXPECT_EQ(n_ended, n_total);
  EXPECT_EQ(sch.kv_cache().stats().n_referenced, 0);
  res.n_preemptions = sch.stats().n_preemptions;
  res.n_hit_tokens = sch.kv_cache().stats().n_hit_tokens;
  return res;
}

SimOptions sim_options(uint64_t seed, int32_t n_blocks, int32_t chunk, bool prefix_cache,
                       bool shuffle, uint64_t shuffle_seed = 7) {
  SimOptions o;
  o.seed = seed;
  o.config = make_config(n_blocks, 4, /*budget=*/24, /*max_seqs=*/6, chunk);
  o.config.kv.enable_prefix_cache = prefix_cache;
  o.config.kv.shuffle_blocks = shuffle;
  o.config.kv.shuffle_seed = shuffle_seed;
  return o;
}

TEST(SchedulerSimulation, RandomWorkloadsOnTinyPools) {
  int64_t preemptions = 0, copies = 0, hits = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    for (int32_t n_blocks : {8, 16}) {
      for (int32_t chunk : {0, 3}) {
        for (bool prefix : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "seed " << seed << " blocks " << n_blocks
                                            << " chunk " << chunk << " prefix " << prefix);
          const SimResult r = simulate(sim_options(seed, n_blocks, chunk, prefix, seed % 2));
          if (::testing::Test::HasFailure()) return;
          preemptions += r.n_preemptions;
          copies += r.n_copies;
          hits += r.n_hit_tokens;
        }
      }
    }
  }
  // The workloads must actually exercise preemption, copy-on-write and prefix hits.
  EXPECT_GT(preemptions, 100);
  EXPECT_GT(copies, 20);
  EXPECT_GT(hits, 100);
}

TEST(SchedulerSimulation, ScheduleDoesNotDependOnPhysicalLayout) {
  // Same workload: identical plans (ids, positions, token counts) and identical reruns; only
  // the slots move with the shuffle seed (design.md V7).
  const SimResult plain = simulate(sim_options(5, 12, 3, true, false));
  const SimResult again = simulate(sim_options(5, 12, 3, true, false));
  const SimResult shuffled1 = simulate(sim_options(5, 12, 3, true, true, 1));
  const SimResult shuffled2 = simulate(sim_options(5, 12, 3, true, true, 2));
  EXPECT_EQ(plain.trace, again.trace);
  EXPECT_EQ(plain.slots, again.slots);
  EXPECT_EQ(plain.trace, shuffled1.trace);
  EXPECT_EQ(plain.trace, shuffled2.trace);
  EXPECT_NE(shuffled1.slots, shuffled2.slots);
  EXPECT_NE(plain.slots, shuffled1.slots);
  EXPECT_GT(plain.n_preemptions, 0);
}

}  // namespace
}  // namespace detllm::engine

namespace detllm::engine {
namespace {

// The verified mode's bookkeeping (speculative sequences): candidates, trusted KV, held
// windows, rewind for verification, rollback at a mismatch, preemption dropping candidates,
// and only trusted KV of committed tokens entering the prefix cache.
TEST(Scheduler, SpeculativeWindowRewindRollback) {
  Scheduler s(make_config(32, /*block_size=*/4));
  SequenceOptions o = gen(20);
  o.speculative = true;
  const SeqId id = s.add(iota_tokens(6), o);
  StepPlan p = s.schedule();  // the prompt, on the invariant numerics
  ASSERT_EQ(p.seqs[0].n_tokens, 6);
  EXPECT_EQ(p.seqs[0].logits_pos, 5);
  s.complete_step(p, /*trusted=*/true);
  EXPECT_EQ(s.sequence(id).n_trusted, 6);
  s.append_token(id, 1);  // committed (sampled from trusted logits)
  EXPECT_EQ(s.sequence(id).n_committed, 7);
  // Three fast decode steps: untrusted KV, candidates.
  for (int i = 0; i < 3; ++i) {
    p = s.schedule();
    ASSERT_EQ(p.seqs[0].n_tokens, 1);
    s.complete_step(p, /*trusted=*/false);
    s.append_token(id, 10 + i, /*committed=*/false);
  }
  const Sequence& q = s.sequence(id);
  EXPECT_EQ(q.n_tokens(), 10);
  EXPECT_EQ(q.n_committed, 7);
  EXPECT_EQ(q.n_trusted, 6);
  EXPECT_EQ(q.n_computed, 9);
  // Only the first block (positions 0-3, trusted, committed) is in the prefix cache.
  EXPECT_EQ(s.kv_cache().stats().n_cached, 1);
  EXPECT_THROW(s.append_token(id, 5, /*committed=*/true), Error);  // candidates pending
  s.set_held(id, true);
  EXPECT_TRUE(s.schedule().empty());  // a held window is not scheduled
  s.rewind(id);
  p = s.schedule();  // the window's inputs: positions 6…9, one verification chunk
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].first_pos, 6);
  EXPECT_EQ(p.seqs[0].n_tokens, 4);
  EXPECT_EQ(p.seqs[0].logits_pos, 6);
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(p.seqs[0].sample);
  s.complete_step(p, /*trusted=*/true);
  EXPECT_EQ(q.n_trusted, 10);
  // The verifier agrees on position 7, rejects position 8: commit 7, roll back from 8.
  s.commit(id, 8);
  EXPECT_EQ(s.kv_cache().stats().n_cached, 2);  // positions 4-7 now trusted and committed
  s.rollback(id, 8);
  EXPECT_EQ(q.n_tokens(), 8);
  EXPECT_EQ(q.n_computed, 8);
  EXPECT_EQ(q.n_trusted, 8);
  EXPECT_EQ(s.kv_cache().block_table(id).size(), 2u);  // the block of positions 8… released
  s.append_token(id, 42, /*committed=*/true);
  EXPECT_EQ(q.n_committed, 9);
  s.check_consistency();
  // A candidate, then preemption: the candidate is dropped, the committed tokens recomputed.
  p = s.schedule();
  s.complete_step(p, /*trusted=*/false);
  s.append_token(id, 77, /*committed=*/false);
  const SeqId other = s.add(iota_tokens(3, 300), gen(2));
  (void)other;
  s.rewind(id);
  EXPECT_THROW(s.rollback(id, 8), Error);  // below the committed tokens
  s.check_consistency();
}

TEST(Scheduler, SpeculativePreemptionDropsCandidates) {
  // 5 blocks of 4: b (older) and a (speculative, newer) grow until the pool runs out; the
  // newest running sequence, a, is preempted and loses its candidates.
  Scheduler s(make_config(5, /*block_size=*/4, /*budget=*/64, /*max_seqs=*/4));
  const SeqId b = s.add(iota_tokens(8, 200), gen(12));
  SequenceOptions o = gen(12);
  o.speculative = true;
  const SeqId a = s.add(iota_tokens(4), o);
  bool first = true;
  bool preempted = false;
  for (int step = 0; step < 20 && !preempted; ++step) {
    StepPlan p = s.schedule();
    s.complete_step(p, /*trusted=*/first);
    for (SeqId id : p.preempted) {
      ASSERT_EQ(id, a);
      const Sequence& qa = s.sequence(a);
      EXPECT_EQ(qa.status, SeqStatus::kWaiting);
      EXPECT_EQ(qa.n_tokens(), qa.n_committed);  // candidates dropped
      EXPECT_EQ(qa.n_committed, 5);
      EXPECT_EQ(qa.n_trusted, 0);
      preempted = true;
    }
    for (const ScheduledSeq& ss : p.seqs) {
      if (!ss.sample) continue;
      s.append_token(ss.id, 50 + step, /*committed=*/ss.id == b || first);
    }
    first = false;
    s.check_consistency();
  }
  EXPECT_TRUE(preempted);
}

// Speculative decoding's drafts (Scheduler::append_drafts): put after the last committed token
// while it is the only token to compute, scheduled with it as one chunk with a logit row per
// position, never published before they are committed, dropped by a rollback or a preemption.
TEST(Scheduler, DraftsAfterTheLastCommittedToken) {
  Scheduler s(make_config(32, /*block_size=*/4));
  SequenceOptions o = gen(12);
  o.speculative = true;
  const SeqId id = s.add(iota_tokens(7), o);
  StepPlan p = s.schedule();
  s.complete_step(p);
  const std::vector<int32_t> drafts{21, 22, 23};
  EXPECT_THROW(s.append_drafts(id, drafts), Error);  // nothing to compute: sample first
  s.append_token(id, 20);                            // position 7, committed
  s.append_drafts(id, drafts);                       // positions 8, 9, 10
  const Sequence& q = s.sequence(id);
  EXPECT_EQ(q.n_tokens(), 11);
  EXPECT_EQ(q.n_committed, 8);
  EXPECT_THROW(s.append_drafts(id, drafts), Error);  // drafts pending
  p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].first_pos, 7);
  EXPECT_EQ(p.seqs[0].n_tokens, 4);
  EXPECT_EQ(p.seqs[0].logits_pos, 7);
  EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(p.seqs[0].sample);
  s.complete_step(p);
  EXPECT_EQ(q.n_computed, 11);
  // Positions 0-7 are committed: blocks 0-3 and 4-7 cached, not 8-11 (drafts).
  EXPECT_EQ(s.kv_cache().stats().n_cached, 2);
  s.commit(id, 9);  // draft 21 accepted, 22 rejected: roll back to 9, the draw committed
  s.rollback(id, 9);
  s.append_token(id, 30, /*committed=*/true);
  EXPECT_EQ(q.n_tokens(), 10);
  EXPECT_EQ(q.n_computed, 9);
  EXPECT_EQ(q.n_committed, 10);
  s.check_consistency();
  // Room below max_new_tokens (12) for the drafts and the draw after them: 3 generated so far,
  // so at most 8 drafts.
  EXPECT_THROW(s.append_drafts(id, std::vector<int32_t>(9, 5)), Error);
  s.append_drafts(id, std::vector<int32_t>(8, 5));
  s.check_consistency();
}

TEST(Scheduler, PreemptionDropsDrafts) {
  // 3 blocks of 4, all held after the prompts (b: 8 tokens, a: 4); b's next token needs a new
  // block, so a — the newer, with drafts — is preempted and loses them, keeping its committed
  // tokens.
  Scheduler s(make_config(3, /*block_size=*/4, /*budget=*/64, /*max_seqs=*/4));
  const SeqId b = s.add(iota_tokens(8, 200), gen(4));
  SequenceOptions o = gen(8);
  o.speculative = true;
  const SeqId a = s.add(iota_tokens(4), o);
  StepPlan p = s.schedule();
  s.complete_step(p);
  s.append_token(b, 1);
  s.append_token(a, 2);
  s.append_drafts(a, std::vector<int32_t>{3, 4, 5});
  p = s.schedule();
  ASSERT_EQ(p.preempted, (std::vector<SeqId>{a}));
  const Sequence& qa = s.sequence(a);
  EXPECT_EQ(qa.status, SeqStatus::kWaiting);
  EXPECT_EQ(qa.n_tokens(), 5);  // prompt + the committed token
  EXPECT_EQ(qa.n_committed, 5);
  s.complete_step(p);
  s.check_consistency();
}

// SchedulerConfig::windows_as_decode_rows: a drafting sequence's window (its last committed
// token and drafts) gets one block-table row per token — a copy of its own — so the kernels see
// a decode step (one query per table row, n_tokens == n_seqs) that step padding takes as such
// (model/step_padding.h); without it the window is one chunk, which is not a decode step.
TEST(Scheduler, WindowsAsDecodeRows) {
  for (bool rows : {true, false}) {
    SchedulerConfig c = make_config(32, /*block_size=*/4);
    c.windows_as_decode_rows = rows;
    Scheduler s(c);
    SequenceOptions o = gen(12);
    o.speculative = true;
    o.drafted = true;
    const SeqId a = s.add(iota_tokens(7), o);
    const SeqId b = s.add(iota_tokens(5, 300), gen(12));  // decodes plainly beside it
    StepPlan p = s.schedule();
    s.complete_step(p);
    s.append_token(a, 20);
    s.append_token(b, 21);
    s.append_drafts(a, std::vector<int32_t>{22, 23, 24});  // positions 8, 9, 10
    EXPECT_EQ(s.is_decode_window(s.sequence(a)), rows);
    p = s.schedule();
    ASSERT_EQ(p.seqs.size(), 2u);
    EXPECT_EQ(p.n_tokens(), 5);
    EXPECT_EQ(p.seqs[0].decode_rows, rows);
    EXPECT_FALSE(p.seqs[1].decode_rows);
    EXPECT_EQ(p.logit_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
    const kernels::StepBatch batch = p.batch();
    const auto key = plan_padded_step(batch, GraphMode::kOn, /*backend_graphs=*/true, 127);
    if (rows) {
      EXPECT_EQ(p.n_table_rows, 5);
      EXPECT_EQ(p.seq_of_token, (std::vector<int32_t>{0, 1, 2, 3, 4}));
      for (int32_t r = 1; r < 4; ++r) {  // every window row reads a's table
        EXPECT_TRUE(std::equal(p.block_tables.begin(), p.block_tables.begin() + p.max_blocks,
                               p.block_tables.begin() + r * p.max_blocks));
      }
      ASSERT_TRUE(key.has_value());  // a decode step of 5 rows: bucket 8
      EXPECT_EQ(key->rows, 8);
    } else {
      EXPECT_EQ(p.n_table_rows, 2);
      EXPECT_EQ(p.seq_of_token, (std::vector<int32_t>{0, 0, 0, 0, 1}));
      EXPECT_FALSE(key.has_value());  // a chunk: run as it is
    }
    EXPECT_EQ(p.positions, (std::vector<int32_t>{7, 8, 9, 10, 5}));
    s.complete_step(p);
    // Only committed KV is published, whatever the layout: a's blocks of positions 0-3 and
    // 4-7 and b's of 0-3, never a's 8-11 (drafts).
    EXPECT_EQ(s.kv_cache().stats().n_cached, 3);
    s.check_consistency();
  }
}

// A window cut by the chunk size goes on as decode rows in the next step (its first token is a
// draft then): still a decode window.
TEST(Scheduler, WindowAsDecodeRowsAcrossSteps) {
  SchedulerConfig c = make_config(32, /*block_size=*/4, /*budget=*/64, /*max_seqs=*/8,
                                  /*chunk=*/2);
  c.windows_as_decode_rows = true;
  Scheduler s(c);
  SequenceOptions o = gen(12);
  o.speculative = true;
  o.drafted = true;
  const SeqId a = s.add(iota_tokens(6), o);
  StepPlan p = s.schedule();  // the prompt in chunks of 2
  while (s.sequence(a).n_computed < 6) {
    s.complete_step(p);
    if (s.sequence(a).n_computed < 6) p = s.schedule();
  }
  s.append_token(a, 20);
  s.append_drafts(a, std::vector<int32_t>{22, 23, 24});  // positions 7, 8, 9
  p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].n_tokens, 2);
  EXPECT_TRUE(p.seqs[0].decode_rows);
  EXPECT_EQ(p.n_table_rows, 2);
  s.complete_step(p);
  p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].first_pos, 8);
  EXPECT_EQ(p.seqs[0].n_tokens, 2);
  EXPECT_TRUE(p.seqs[0].decode_rows);
  EXPECT_EQ(p.seqs[0].logits_pos, 8);
  EXPECT_EQ(p.n_table_rows, 2);
  s.complete_step(p);
  s.check_consistency();
}

}  // namespace
}  // namespace detllm::engine
