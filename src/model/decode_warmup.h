// Decode-graph warm-up: before serving, run one padded decode step of each (row bucket, table
// width) shape — capturing its CUDA graph (LlamaModel::forward captures on a shape's first
// step) — so that requests replay graphs from their first decode step instead of paying an
// eager step and a capture. The steps write only KvStorage's pad slots (no sequence's blocks)
// and their logits are discarded, so no sequence's bits change (V8: a replay gives the eager
// step's bits). Tested on the CPU with a graph-capturing backend (CpuGraphOps):
// tests/model/decode_warmup_test.cpp; on the GPU: tests/cuda/cuda_graph_test.cpp.
//
// A warm-up step of key (R, C), n real rows (n = R/2 + 1, or 1 for R = 1 and for the fixed
// shape of the padded mode) plus R - n pad rows added by pad_step:
//   pad slots  [0, R - n)      the pad rows (pad_step)
//              [R - n, R)      the real rows: token 0 at position 0, one sequence each, whose
//                              table row is [the pad block of its slot, pad block 0, …] (C wide)
// so R pad slots are needed (decode_warmup_pad_slots).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "determinism/policy.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"

namespace detllm {

// The shapes a warm-up runs: the fixed shape (padded mode) first, then row buckets up to the one
// of min(max_seqs, largest bucket) × table widths up to table_bucket(ceil(max_tokens /
// block_size)), smallest width first (short contexts are the most common), at most `limit`.
// Empty when `padding` never pads on this backend (backend_graphs false and mode kAuto).
std::vector<PaddedStepKey> decode_warmup_keys(const DecodePadding& padding, bool backend_graphs,
                                              int32_t max_seqs, int32_t max_tokens,
                                              int32_t block_size, size_t limit);

// Pad slots a KvStorage needs so that decode_warmup_keys' steps fit: the largest row count
// they use (the largest bucket, or the fixed rows) — at least pad_slots_needed(padding). 0
// when padding never pads.
int32_t decode_warmup_pad_slots(const DecodePadding& padding, bool backend_graphs);

struct DecodeWarmupResult {
  int32_t steps = 0;     // padded decode steps run
  int32_t captures = 0;  // graphs captured by them (0 on a backend without graphs)
};

// Runs one warm-up step of every key under every GEMM numerics in `numerics` (the steps'
// StepBatch::numerics; graphs are keyed by what Ops::gemm_numerics runs for it, so a numerics
// the ops runs alike is warmed once), on kv's pad slots. Throws detllm::Error if kv has fewer
// than R pad slots for a key. progress(done, total) after each step.
DecodeWarmupResult warm_up_decode_steps(const LlamaModel& model, KvStorage& kv,
                                        const DecodePadding& padding,
                                        std::span<const PaddedStepKey> keys,
                                        std::span<const NumericsMode> numerics,
                                        const std::function<void(size_t, size_t)>& progress = {});

}  // namespace detllm
