// Decode-step padding: buckets, the pad decision and the padded metadata (see step_padding.h).
#include "model/step_padding.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace detllm {
namespace {
// Up to 512 rows (max_seqs 512 gives 1.12× the output tok/s of 256 on ShareGPT on the H200,
// docs/perf.md); 384 keeps the largest gap, hence the pad slots, at 127 rows.
constexpr std::array<int32_t, 11> kRowBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512};
}  // namespace

const char* graph_mode_name(GraphMode mode) {
  switch (mode) {
    case GraphMode::kAuto:
      return "auto";
    case GraphMode::kOn:
      return "on";
    case GraphMode::kOff:
      return "off";
  }
  return "?";
}

std::span<const int32_t> decode_row_buckets() {
  return kRowBuckets;
}

int32_t row_bucket(int32_t n_rows) {
  if (n_rows <= 0) return 0;
  for (int32_t b : kRowBuckets)
    if (b >= n_rows) return b;
  return 0;
}

int32_t table_bucket(int32_t max_blocks) {
  int32_t c = 1;
  while (c < max_blocks) c *= 2;
  return c;
}

int32_t max_pad_rows() {
  int32_t gap = kRowBuckets[0] - 1, prev = kRowBuckets[0];
  for (int32_t b : kRowBuckets) {
    gap = std::max(gap, b - prev - 1);
    prev = b;
  }
  return gap;
}

bool pads_decode_steps(GraphMode mode, bool backend_graphs) {
  return mode == GraphMode::kOn || (mode == GraphMode::kAuto && backend_graphs);
}

namespace {
bool pads(GraphMode mode, bool backend_graphs) {
  return pads_decode_steps(mode, backend_graphs);
}
}  // namespace

int32_t pad_slots_needed(const DecodePadding& padding, bool backend_graphs) {
  if (!pads(padding.mode, backend_graphs)) return 0;
  // Fixed rows: the fixed shape's pads, and the buckets' for steps run without it.
  return std::max(padding.fixed_rows - 1, max_pad_rows());
}

std::optional<PaddedStepKey> plan_padded_step(const kernels::StepBatch& batch, GraphMode mode,
                                              bool backend_graphs, int32_t pad_slots) {
  return plan_padded_step(batch, DecodePadding{mode, 0}, backend_graphs, pad_slots);
}

std::optional<PaddedStepKey> plan_padded_step(const kernels::StepBatch& batch,
                                              const DecodePadding& padding, bool backend_graphs,
                                              int32_t pad_slots) {
  if (!pads(padding.mode, backend_graphs)) return {};
  const int32_t n = batch.n_tokens;
  if (n == 0 || n != batch.n_seqs) return {};  // decode steps only: one token per sequence
  const int32_t rows =
      padding.fixed_rows > 0 ? (n <= padding.fixed_rows ? padding.fixed_rows : 0) : row_bucket(n);
  if (rows == 0 || rows - n > pad_slots) return {};
  return PaddedStepKey{rows, table_bucket(batch.max_blocks)};
}

size_t padded_meta_size(const PaddedStepKey& key) {
  return static_cast<size_t>(key.rows) * (5 + static_cast<size_t>(key.table_cols));
}

kernels::StepBatch PaddedStep::batch(const int32_t* base) const {
  const int32_t r = key.rows;
  kernels::StepBatch b;
  b.n_tokens = r;
  b.positions = base + r;
  b.seq_of_token = base + 2 * r;
  b.slots = base + 3 * r;
  b.n_seqs = r;
  b.max_blocks = key.table_cols;
  b.block_tables = base + 5 * r;
  b.numerics = numerics;
  return b;
}

void pad_step(const PaddedStepKey& key, std::span<const int32_t> tokens,
              const kernels::StepBatch& batch, std::span<const int32_t> logit_rows,
              int32_t pad_block, int32_t block_size, PaddedStep& out) {
  const int32_t n = batch.n_tokens, r = key.rows, c = key.table_cols;
  const int32_t n_out = static_cast<int32_t>(logit_rows.size());
  check(n == static_cast<int32_t>(tokens.size()) && n <= r && batch.n_seqs <= n && n_out <= r &&
            batch.max_blocks <= c && block_size > 0 && pad_block >= 0,
        "pad_step: a step of {} tokens, {} sequences, {} blocks does not fit bucket {}×{}", n,
        batch.n_seqs, batch.max_blocks, r, c);
  out.key = key;
  out.n_tokens = n;
  out.n_logit_rows = n_out;
  out.numerics = batch.numerics;
  out.meta.assign(padded_meta_size(key), pad_block);  // table filler: the first pad block
  int32_t* tok = out.meta.data();
  int32_t* pos = tok + r;
  int32_t* seq = tok + 2 * r;
  int32_t* slot = tok + 3 * r;
  int32_t* rows = tok + 4 * r;
  int32_t* table = tok + 5 * r;
  for (int32_t i = 0; i < n; ++i) {
    tok[i] = tokens[i];
    pos[i] = batch.positions[i];
    seq[i] = batch.seq_of_token[i];
    slot[i] = batch.slots[i];
  }
  for (int32_t s = 0; s < batch.n_seqs; ++s)
    std::copy_n(batch.block_tables + static_cast<int64_t>(s) * batch.max_blocks, batch.max_blocks,
                table + static_cast<int64_t>(s) * c);
  for (int32_t i = n; i < r; ++i) {  // pad j = i - n
    const int32_t j = i - n;
    tok[i] = 0;
    pos[i] = 0;
    seq[i] = i;  // >= n >= n_seqs: a table row of its own
    slot[i] = pad_block * block_size + j;
    table[static_cast<int64_t>(i) * c] = pad_block + j / block_size;
  }
  for (int32_t i = 0; i < r; ++i) rows[i] = i < n_out ? logit_rows[i] : i;
}

}  // namespace detllm
