// Continuous-batching scheduler (vLLM v1 contract): each schedule() picks, for each sequence,
// how many of its tokens to compute this step, under a token budget and a sequence limit, with
// no separate prefill and decode phases; it owns the KV block manager and hands the runner a
// StepPlan from which kernels::StepBatch is a view. Never touches a device.
//
// Contract
//   schedule() -> StepPlan: a list of {seq, first_pos, n_tokens}: compute positions
//   [first_pos, first_pos + n_tokens) of seq, where first_pos = its n_computed. A decoding
//   sequence asks for 1 token, a prefilling (or recomputing) one for up to chunk_size.
//   Σ n_tokens <= max_tokens_per_step, number of seqs <= max_seqs.
//   The runner applies plan.copies (in order), runs the forward over plan.batch(), then calls
//   complete_step(plan); the engine samples the rows of plan.logit_rows, calls append_token()
//   for sequences whose `sample` flag is set, and finish()/abort() for those that stop.
//   Only one plan may be in flight: schedule() again before complete_step() is an error.
//
// Policy (one step)
//   1. Running sequences, in admission order: each gets min(uncomputed tokens, chunk_size,
//      budget left) tokens. If its blocks do not fit, a prefill chunk shrinks to what fits;
//      when not even one token fits, the most recently admitted running sequence is preempted
//      (it may be this one), repeatedly. Preempted: blocks released (full computed blocks stay
//      in the prefix cache), n_computed = 0, back to the FRONT of the waiting queue; its
//      generated tokens are kept and recomputed with the prompt.
//   2. If nothing was preempted this step: admit waiting sequences FCFS (the queue head blocks
//      those behind it) while budget, max_seqs and blocks allow. On admission the longest
//      cached prefix is reused (n_computed = hit tokens, always leaving >= 1 token to compute);
//      not for all_logits sequences, which need every position's logits and recompute all.
//      A waiting sequence is admitted only if its whole first chunk fits.
//   Isolated sequences (SequenceOptions::isolated: the `padded` mode's deterministic requests
//   — CoRun): while any is live, a step either computes ONE isolated sequence's whole
//   uncomputed prompt (or recompute) and nothing else — batch 1, never chunked, no prefix-cache
//   hit, chunk_size and the token budget ignored for it — or is a decode step (every running
//   sequence with one token to compute), or is a step of the OTHER sequences only (policy 1-2
//   restricted to them: chunked, batched, cached). Prefill first: a running sequence with more
//   than one token left goes first (alone if isolated, else an others' step); then the waiting
//   head if it fits (alone if isolated, else an others' step admitting FCFS up to the next
//   isolated head); else the decode step. So an isolated sequence's rows only ever run alone or
//   in a decode-only step, whatever the others do; with no isolated sequence live, policy 1-2.
//   A drafting isolated sequence (SequenceOptions::drafted) whose uncomputed tokens are its
//   last committed token and drafts (is_decode_window; with windows_as_decode_rows any
//   drafting sequence's) is a decode sequence: after every
//   decode sequence has its row, the rows left up to max_seqs (the fixed decode shape,
//   EngineConfig::decode_fixed_rows) go to such windows, oldest first, each token a decode row
//   of its own (ScheduledSeq::decode_rows). A window that does not fit goes on in the next
//   decode steps (its drafts wait, uncomputed). So every row of it is a decode row in a step of
//   the fixed shape, as plain decoding's are (docs/speculative.md, "The padded mode").
//   Liveness: the oldest running sequence is never preempted by another and gets >= 1 token
//   each step; every request fits the pool alone (checked by add()), so it finishes, then the
//   next oldest, and so on: no livelock, no starvation.
//
// Verified mode (SequenceOptions::speculative, driven by the engine; docs/modes.md): a held
// sequence (a full candidate window waiting for its verification group) is skipped; rewind()
// makes its untrusted KV "not computed" so the window's inputs are scheduled like a prefill
// chunk, with a logit row per position from the last committed token on; commit() and
// rollback() apply the verdict; preemption drops the candidates (tokens past n_committed).
// N-gram speculation (engine/speculation.h) uses the same bookkeeping: append_drafts() puts
// drafts after the last committed token, still uncomputed, so that one chunk computes both.
//
// n samples per prompt: fork(parent) after the prompt is computed. The child shares the
// parent's blocks (ref counts); the shared partial last block is copied on the first write
// (a BlockCopy in the plan).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache.h"
#include "engine/sequence.h"
#include "kernels/ops.h"

namespace detllm::engine {

struct SchedulerConfig {
  KvCacheConfig kv;                    // block_size, n_blocks, prefix cache, shuffled allocation
  int32_t max_tokens_per_step = 2048;  // token budget of one step (>= 1)
  int32_t max_seqs = 256;              // sequences per step and running at once (>= 1)
  int32_t chunk_size = 0;              // prefill chunk limit; 0 = whole prompt within the budget
  // Every drafting sequence's window (not only an isolated one's) is verified as decode rows
  // (is_decode_window), so that a step of decode rows and windows is a decode step that the
  // model pads to a row bucket and replays from a graph (model/step_padding.h). The engine sets
  // it where decode steps are padded (EngineConfig::cuda_graphs on, or auto with graphs); an
  // execution setting: a window row is a decode row by V3/V4 (docs/speculative.md).
  bool windows_as_decode_rows = false;

  void validate() const;  // throws detllm::Error
};

// One sequence's share of a step.
struct ScheduledSeq {
  SeqId id = -1;
  int32_t first_pos = 0;    // == the sequence's n_computed before the step
  int32_t n_tokens = 0;     // positions [first_pos, first_pos + n_tokens) are computed
  int32_t token_begin = 0;  // its first row in the plan's per-token arrays
  // Index of its first row in plan.logit_rows, -1 when it needs no logits this step.
  int32_t logits_begin = -1;
  // The chunk reaches the end of the sequence's tokens: the last row's logits give token
  // number first_pos + n_tokens (sample it, unless the request is done).
  bool sample = false;
  // Scoring: logits of every scheduled position are wanted (logits_begin … + n_tokens). After a
  // preemption a position may be scheduled again; its logits repeat (bitwise, in invariant mode).
  bool all_logits = false;
  // Position whose logits are row logits_begin; the rows that follow are consecutive positions.
  // A speculative sequence (verified mode) gets the logits of every position from its last
  // committed token on: the rows that verify candidates, then the sampling row.
  int32_t logits_pos = 0;
  int32_t logit_row(int32_t pos) const { return logits_begin + pos - logits_pos; }
  // The padded mode's draft window (Scheduler::is_decode_window): each of the n_tokens rows
  // is a decode row of its own — its own block-table row (a copy of the sequence's), so the
  // kernels see n_tokens sequences of one query each, every one reading KV [0, its position]
  // (KV is written before attention reads it: the rows before it in the window are there).
  bool decode_rows = false;
};

// Everything the runner needs for one forward step. Row s of block_tables belongs to seqs[s],
// except after a ScheduledSeq with decode_rows, which has one table row per token (the rows
// are in plan order: seq_of_token names each token's).
//
//   token rows  0 1 2 3 4 5 6 | 7 | 8        seq_of_token  0 0 0 0 0 0 0 | 1 | 2
//   seqs[0] prefill chunk     seqs[1], seqs[2] decode one token each
//   slots[t] = block_tables[seq_of_token[t] * max_blocks + positions[t] / B] * B
//              + positions[t] % B                                  (B = block_size)
struct StepPlan {
  int64_t step = 0;                   // 0, 1, 2, ... per schedule() call
  std::vector<ScheduledSeq> seqs;     // (n_seqs)
  std::vector<int32_t> token_ids;     // (n_tokens) input token of each row
  std::vector<int32_t> positions;     // (n_tokens) absolute position in its sequence
  std::vector<int32_t> seq_of_token;  // (n_tokens) row of block_tables
  std::vector<int32_t> slots;         // (n_tokens) KV slot the row's K/V is written to
  int32_t max_blocks = 0;             // row length of block_tables
  // (n_table_rows, max_blocks) physical block ids covering positions [0, first_pos + n_tokens)
  // of each sequence; padded with -1 (never read).
  std::vector<int32_t> block_tables;
  int32_t n_table_rows = 0;  // n_seqs(), plus n_tokens - 1 for each decode_rows sequence
  std::vector<int32_t> logit_rows;  // token rows whose logits are needed, ascending
  std::vector<BlockCopy> copies;    // copy-on-write: apply in this order, before the forward
  std::vector<SeqId> preempted;     // moved back to waiting by this step (for metrics/logs)
  // The step's GEMM numerics, the same for all its rows (docs/modes.md, "Mixed traffic"): the
  // engine sets it after schedule() (Engine::step_class); batch() hands it to every GEMM.
  NumericsMode numerics = NumericsMode::kInvariant;

  int32_t n_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t n_seqs() const { return static_cast<int32_t>(seqs.size()); }
  bool empty() const { return seqs.empty(); }
  // View for the kernels; valid while this plan lives and is not modified.
  kernels::StepBatch batch() const;
};

struct SchedulerStats {
  int64_t n_steps = 0;
  int64_t n_added = 0;
  int64_t n_forked = 0;
  int64_t n_finished = 0;
  int64_t n_aborted = 0;
  int64_t n_preemptions = 0;
  int64_t n_scheduled_tokens = 0;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);  // validates config
  // A drafting sequence — isolated, or any with config().windows_as_decode_rows — whose
  // uncomputed tokens are its last committed token (or a draft after it) and drafts: its
  // window is computed as decode rows (ScheduledSeq::decode_rows), never as a prefill chunk.
  bool is_decode_window(const Sequence& s) const;

  const SchedulerConfig& config() const { return config_; }

  // Queues a sequence (status waiting) and returns its id. Throws detllm::Error when the
  // prompt is empty or when prompt + max_new_tokens can never fit in the KV pool.
  SeqId add(std::vector<int32_t> prompt, const SequenceOptions& options);
  // A copy of `parent` (tokens, options, progress) sharing its computed KV blocks: running if
  // the parent runs (then it may exceed max_seqs running until others finish; steps still
  // hold at most max_seqs), else queued right behind it. Not while the parent is in flight.
  SeqId fork(SeqId parent);

  StepPlan schedule();
  // The runner computed every token of the plan (sequences finished or aborted since are
  // skipped). Same as mark_computed(s.id, s.first_pos + s.n_tokens, trusted) for each s.
  // trusted: the step ran on the invariant numerics (always true outside the verified mode).
  void complete_step(const StepPlan& plan, bool trusted = true);
  // Sequence `id` has KV for its first n_computed tokens; n_computed must lie within what was
  // scheduled for it. Ends its in-flight state; the rest (if any) is scheduled again. A
  // speculative sequence's new KV is trusted when `trusted` and its KV before was all trusted.
  void mark_computed(SeqId id, int32_t n_computed, bool trusted = true);
  // Appends a sampled token. Requires every token of the sequence computed and fewer than
  // max_new_tokens generated. Speculative sequences: `committed` (a token sampled from
  // trusted logits; no candidate may be pending) or a candidate.
  void append_token(SeqId id, int32_t token, bool committed = true);

  // ---- speculative sequences (the verified mode: engine/verifier.cpp drives them) ----
  // The first n_committed tokens are final (candidates verified): n_committed may only grow,
  // up to the sequence's tokens.
  void commit(SeqId id, int32_t n_committed);
  // Drops every token from n_keep on (n_keep >= n_committed): computed and trusted counts are
  // cut to it and KV blocks past it released. Not while in flight.
  void rollback(SeqId id, int32_t n_keep);
  // Treats the untrusted KV as not computed (n_computed = n_trusted; tokens kept): the next
  // schedule() recomputes the window's inputs like a prefill chunk. Releases a held sequence.
  void rewind(SeqId id);
  // Appends drafts (uncommitted tokens) after the committed tokens of a running speculative
  // sequence whose last token is the only one to compute (no candidate pending, not in
  // flight): the next schedule() computes that token and the drafts like a prefill chunk, with
  // a logit row per position. Leaves room for the draw after them: n_generated + drafts <
  // max_new_tokens.
  void append_drafts(SeqId id, std::span<const int32_t> drafts);
  // A held sequence is not scheduled (a full window waiting for its verification group).
  void set_held(SeqId id, bool held);
  void finish(SeqId id);  // done (stop condition met): releases its blocks, forgets it
  void abort(SeqId id);   // cancelled: same, counted apart

  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  const Sequence& sequence(SeqId id) const;                      // throws for an unknown id
  std::span<const SeqId> running() const { return running_; }    // admission order
  const std::deque<SeqId>& waiting() const { return waiting_; }  // front is admitted next
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool has_unfinished() const { return !seqs_.empty(); }
  const KvCacheManager& kv_cache() const { return kv_; }
  // KvCacheManager::drop_idle_cached: the prefix cache's idle blocks go back to the free list.
  int32_t reset_prefix_cache() { return kv_.drop_idle_cached(); }
  const SchedulerStats& stats() const { return stats_; }

  // Verifies the KV accounting and every sequence's state; throws detllm::Error on a breach.
  void check_consistency() const;

 private:
  Sequence& seq(SeqId id);
  void preempt_last_running(StepPlan& plan);
  void remove(SeqId id);
  // Policy 1-2 (others_only: skipping isolated sequences, admitting up to an isolated head).
  void schedule_batched(StepPlan& plan, std::vector<std::pair<SeqId, int32_t>>& picks,
                        bool others_only);
  // schedule() while an isolated sequence is live: one isolated prefill, an others' step, or
  // a decode step.
  void schedule_isolated(StepPlan& plan, std::vector<std::pair<SeqId, int32_t>>& picks);

  // The prefix-cache hit a waiting sequence may reuse (none for all_logits and isolated).
  PrefixMatch prefix_match(const Sequence& s) const;
  // min(want, budget, chunk_size when set): a prefill chunk's length.
  int32_t chunk_limit(int32_t want, int32_t budget) const;
  // The free blocks hold a waiting sequence's first `want` tokens after its cache hit `match`.
  bool head_fits(const PrefixMatch& match, int32_t want) const;
  // Admits the waiting head `id` with `match`, scheduling `want` tokens of it.
  void admit(SeqId id, const PrefixMatch& match, int32_t want, StepPlan& plan,
             std::vector<std::pair<SeqId, int32_t>>& picks);
  void build_rows(const std::vector<std::pair<SeqId, int32_t>>& picks, StepPlan& plan);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<SeqId, Sequence> seqs_;
  std::vector<SeqId> running_;  // admission order; preemption takes from the back
  std::deque<SeqId> waiting_;   // FCFS; preempted sequences go to the front
  int32_t n_in_flight_ = 0;     // sequences with n_in_flight > 0
  int32_t n_isolated_ = 0;      // live sequences with options.isolated
  SeqId next_id_ = 0;
  SchedulerStats stats_;
};

}  // namespace detllm::engine
