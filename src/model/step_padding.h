// Padding of decode steps to batch-size buckets, so that a backend with step graphs (CUDA
// graphs) can capture the forward once per bucket and replay it (design.md V8). Pure host
// logic — the decision "pad this step?", the buckets and the fixed metadata layout — so it is
// tested on the CPU: tests/model/step_padding_test.cpp (and padded vs eager forward bits in
// tests/model/padded_forward_test.cpp; graph replay in tests/cuda/cuda_graph_test.cpp).
//
// Padded step of R = row bucket rows and C = table bucket columns; real rows keep their order:
//   row   0 … n-1      the step's tokens, positions, sequences, slots (unchanged)
//   row   n … R-1      pad j = row - n: token 0, position 0, sequence row `row`, whose table row
//                      is [pad block of j, …]; it writes its K/V to pad slot j (KvStorage's pad
//                      blocks, never handed to a sequence) and its logits are discarded.
//   table (R, C)       real rows' tables widened with the first pad block (never read).
//   logit rows (R)     the real logit rows first, then R - n_out filler rows.
// Every kernel computes a row from that row alone (and its own KV), so real rows' bits do not
// change: padding and graph replay give the eager step's bits (V8).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/ops.h"

namespace detllm {

// How decode steps execute (an execution setting: it changes no bit). kAuto: pad to buckets
// and replay graphs where the backend has them (CUDA), eager elsewhere; kOn: pad decode steps
// on every backend (graphs where possible; on the CPU this exercises padding, V8); kOff: eager.
enum class GraphMode { kAuto, kOn, kOff };
const char* graph_mode_name(GraphMode mode);

// Whether decode steps are padded under `mode` (kOn; kAuto where the backend has graphs), so
// that a step of decode rows — a drafting sequence's window among them — replays a graph.
bool pads_decode_steps(GraphMode mode, bool backend_graphs);

// Row buckets: 1, 2, 4, …, 256, 384, 512 (a decode step of n rows runs as the smallest bucket ≥ n).
std::span<const int32_t> decode_row_buckets();
// The smallest bucket ≥ n_rows; 0 when n_rows is 0 or above the largest bucket.
int32_t row_bucket(int32_t n_rows);
// Block-table width of a padded step: the next power of two ≥ max_blocks (≥ 1).
int32_t table_bucket(int32_t max_blocks);
// The most pad rows any step can need (largest gap between buckets): the pad slots to reserve.
int32_t max_pad_rows();

// Step graphs a LlamaModel keeps (row buckets × table widths × KV storages × GEMM numerics);
// past it the least recently used one is dropped (and captured again if it comes back).
inline constexpr size_t kMaxStepGraphs = 128;

struct PaddedStepKey {
  int32_t rows = 0;        // R: row bucket
  int32_t table_cols = 0;  // C: block-table width
  bool operator==(const PaddedStepKey&) const = default;
};

// Decode padding: the graph mode and, optionally, ONE fixed row count — CoRun's padded mode
// (determinism/modes.h): every decode step runs at the same shape R = fixed_rows whatever the
// number of sequences, so the library GEMMs always see the same M. fixed_rows = 0: the buckets.
struct DecodePadding {
  // Implicit from a GraphMode: the buckets under that mode.
  DecodePadding(GraphMode m = GraphMode::kAuto, int32_t fixed = 0) : mode(m), fixed_rows(fixed) {}
  GraphMode mode;
  int32_t fixed_rows;  // > 0: pad every decode step of ≤ fixed_rows rows to exactly that
};
// Pad slots a KvStorage must reserve so that `padding` can pad every decode step it promises
// to: 0 when it never pads; max_pad_rows() for buckets; with fixed rows the larger of that
// and fixed_rows - 1 (steps run without the fixed shape use the buckets).
int32_t pad_slots_needed(const DecodePadding& padding, bool backend_graphs);

// The one decision: pad (and, with `backend_graphs`, capture/replay) this step? Yes when the
// mode allows it, every sequence contributes exactly one token (n_tokens == n_seqs: a decode
// step), the rows fit the largest bucket and `pad_slots` (KvStorage::n_pad_slots) cover the pad
// rows. Returns the key of the padded shape, or nothing: run the step as it is.
std::optional<PaddedStepKey> plan_padded_step(const kernels::StepBatch& batch, GraphMode mode,
                                              bool backend_graphs, int32_t pad_slots);
// The same decision under a DecodePadding: with fixed_rows > 0 the key's rows are fixed_rows
// (a decode step of more rows, or without enough pad slots, runs as it is).
std::optional<PaddedStepKey> plan_padded_step(const kernels::StepBatch& batch,
                                              const DecodePadding& padding, bool backend_graphs,
                                              int32_t pad_slots);

// A padded step's metadata in one int32 array (one upload), layout fixed by the key:
//   [tokens (R) | positions (R) | seq_of_token (R) | slots (R) | logit_rows (R) | tables (R×C)]
struct PaddedStep {
  PaddedStepKey key;
  int32_t n_tokens = 0;      // real rows
  int32_t n_logit_rows = 0;  // real logit rows (the first ones of the padded list)
  NumericsMode numerics = NumericsMode::kInvariant;  // the step's (StepBatch::numerics)
  std::vector<int32_t> meta;

  std::span<const int32_t> tokens() const { return {meta.data(), size_t(key.rows)}; }
  std::span<const int32_t> logit_rows() const {
    return {meta.data() + 4 * key.rows, size_t(key.rows)};
  }
  // The padded batch over a copy of meta at `base` (host: meta.data(); or its device copy).
  kernels::StepBatch batch(const int32_t* base) const;
};

size_t padded_meta_size(const PaddedStepKey& key);  // int32 elements of PaddedStep::meta

// Builds the padded step. pad_block/block_size: KvStorage's first pad block and block size
// (pad j writes slot pad_block * block_size + j, so its pad slots must cover R - n rows).
// `out` is reused (its meta keeps its capacity across steps).
void pad_step(const PaddedStepKey& key, std::span<const int32_t> tokens,
              const kernels::StepBatch& batch, std::span<const int32_t> logit_rows,
              int32_t pad_block, int32_t block_size, PaddedStep& out);

}  // namespace detllm
