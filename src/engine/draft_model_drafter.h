// The draft-model drafter (vLLM's `draft_model` speculative method): a smaller model with the
// target's vocabulary proposes the next tokens greedily, on a KV cache of its own. Its drafts
// only ever change the schedule: the engine keeps a draft iff it equals the target's own draw
// (draft_verdict.h), so the output bits do not depend on the draft model at all.
//
// State. One slot per drafted sequence (the engine's SeqId): the tokens whose K/V the draft
// cache holds, on blocks of its own pool. A call gives each sequence its tokens now (prompt +
// committed output); the slot keeps the longest common prefix with them — the accepted drafts'
// K/V is already there, the rejected ones' is overwritten — and computes the rest:
//   round 0   one forward over every sequence's missing tokens (a prefill the first time,
//             usually 1–2 tokens after: the target's correction or bonus token)
//   round i   one forward over every sequence's draft d_i (one row each), i = 1 … k-1
// d_{i+1} = argmax of the row after d_i (lowest id on ties). Every round is one batched
// forward of all the sequences still drafting. The draft model runs on its ops' own numerics
// (kInvariant): the drafts, and so the schedule, are a function of the tokens alone.
// A sequence whose blocks do not fit in the pool gets no drafts this time (never an error).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"

namespace detllm::engine {

class DraftModelDrafter {
 public:
  // n_blocks × block_size: the draft cache's capacity in tokens, shared by all sequences.
  DraftModelDrafter(const LlamaModel& draft, int32_t n_blocks, int32_t block_size);

  struct Want {
    SeqId seq = -1;
    std::span<const int32_t> tokens;  // the sequence's tokens (>= 1), all committed
    int32_t k = 0;                    // drafts wanted (>= 1)
  };
  // Drafts for each want, in order (empty where the pool had no room).
  std::vector<std::vector<int32_t>> propose(std::span<const Want> wants);
  // The sequence is gone: its slot's blocks go back to the pool.
  void forget(SeqId seq);

  // Forwards of the draft model and rows they computed, over every call.
  int64_t n_forwards() const { return n_forwards_; }
  int64_t n_rows() const { return n_rows_; }
  int32_t n_free_blocks() const { return static_cast<int32_t>(free_.size()); }

 private:
  struct Slot {
    std::vector<int32_t> tokens;  // K/V computed in the draft cache at positions 0 …
    std::vector<int32_t> blocks;  // physical blocks, logical order
  };
  // Gives s blocks for n_tokens positions; false (nothing taken) when the pool is short.
  bool reserve(Slot& s, int32_t n_tokens);
  // One forward: feeds[i] at positions from starts[i] for slots[i]; out[i] = the argmax of the
  // row after each one's last fed token.
  void forward(std::span<Slot* const> slots, std::span<const std::vector<int32_t>> feeds,
               std::span<int32_t> out);

  const LlamaModel& draft_;
  KvStorage kv_;
  int32_t block_size_;
  std::vector<int32_t> free_;  // free physical blocks (a stack)
  std::unordered_map<SeqId, Slot> slots_;
  std::vector<float> logits_;  // (rows, vocab) host, reused
  int64_t n_forwards_ = 0;
  int64_t n_rows_ = 0;
};

}  // namespace detllm::engine
