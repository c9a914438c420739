// Decode-graph warm-up on pad slots (see decode_warmup.h).
#include "model/decode_warmup.h"

#include <algorithm>

#include "core/error.h"

namespace detllm {
namespace {

bool pads(const DecodePadding& padding, bool backend_graphs) {
  return pad_slots_needed(padding, backend_graphs) > 0;
}

// Real rows of a warm-up step of `key`: the fewest whose bucket (or fixed shape) is key.rows.
int32_t real_rows(const PaddedStepKey& key, const DecodePadding& padding) {
  if (padding.fixed_rows > 0 && key.rows == padding.fixed_rows) return 1;
  int32_t below = 0;  // the bucket below key.rows: one more real row than it needs padding to it
  for (int32_t b : decode_row_buckets()) {
    if (b >= key.rows) break;
    below = b;
  }
  return below + 1;
}

}  // namespace

std::vector<PaddedStepKey> decode_warmup_keys(const DecodePadding& padding, bool backend_graphs,
                                              int32_t max_seqs, int32_t max_tokens,
                                              int32_t block_size, size_t limit) {
  std::vector<PaddedStepKey> keys;
  if (!pads(padding, backend_graphs) || max_seqs <= 0 || max_tokens <= 0 || block_size <= 0)
    return keys;
  std::vector<int32_t> rows;
  if (padding.fixed_rows > 0) rows.push_back(padding.fixed_rows);
  const int32_t top = row_bucket(std::min(max_seqs, decode_row_buckets().back()));
  for (int32_t r : decode_row_buckets())
    if (r <= top && std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  const int32_t widest = table_bucket((max_tokens + block_size - 1) / block_size);
  for (int32_t c = 1; c <= widest; c *= 2)
    for (int32_t r : rows) {
      if (keys.size() >= limit) return keys;
      keys.push_back({r, c});
    }
  return keys;
}

int32_t decode_warmup_pad_slots(const DecodePadding& padding, bool backend_graphs) {
  const int32_t needed = pad_slots_needed(padding, backend_graphs);
  if (needed == 0) return 0;
  return std::max({needed, decode_row_buckets().back(), padding.fixed_rows});
}

DecodeWarmupResult warm_up_decode_steps(const LlamaModel& model, KvStorage& kv,
                                        const DecodePadding& padding,
                                        std::span<const PaddedStepKey> keys,
                                        std::span<const NumericsMode> numerics,
                                        const std::function<void(size_t, size_t)>& progress) {
  DecodeWarmupResult out;
  kernels::Ops& ops = model.ops();
  const bool graphs = model.graph_capture() != nullptr;
  const int32_t bs = kv.block_size();
  const int32_t pad_block = kv.pad_block();
  const size_t total = keys.size() * numerics.size();
  const int64_t captures_before = model.step_stats().n_graph_captures;
  std::vector<NumericsMode> seen;  // the numerics the ops really run (a fast ops stays fast)
  std::vector<int32_t> tokens, positions, seqs, slots, tables, logit_rows;
  size_t done = 0;
  for (NumericsMode mode : numerics) {
    const NumericsMode selected = ops.gemm_numerics(mode);
    const bool repeat = std::find(seen.begin(), seen.end(), selected) != seen.end();
    seen.push_back(selected);
    for (const PaddedStepKey& key : keys) {
      ++done;
      if (repeat) {  // the same graphs as a numerics already warmed
        if (progress) progress(done, total);
        continue;
      }
      check(key.rows >= 1 && key.table_cols >= 1 && key.rows <= kv.n_pad_slots(),
            "decode warm-up: a step of {} rows needs {} pad slots; the KV storage has {}",
            key.rows, key.rows, kv.n_pad_slots());
      const int32_t n = real_rows(key, padding), c = key.table_cols;
      tokens.assign(n, 0);
      positions.assign(n, 0);
      seqs.resize(n);
      slots.resize(n);
      logit_rows.resize(n);
      tables.assign(static_cast<size_t>(n) * c, pad_block);
      for (int32_t i = 0; i < n; ++i) {
        const int32_t pad_slot = key.rows - n + i;  // after the pad rows' slots
        seqs[i] = i;
        slots[i] = pad_block * bs + pad_slot;
        tables[static_cast<size_t>(i) * c] = pad_block + pad_slot / bs;
        logit_rows[i] = i;
      }
      kernels::StepBatch b;
      b.n_tokens = n;
      b.positions = positions.data();
      b.seq_of_token = seqs.data();
      b.slots = slots.data();
      b.n_seqs = n;
      b.max_blocks = c;
      b.block_tables = tables.data();
      b.numerics = mode;
      const DecodePadding step_padding =
          padding.fixed_rows > 0 && key.rows == padding.fixed_rows
              ? padding
              : DecodePadding{padding.mode, 0};
      const std::optional<PaddedStepKey> planned =
          plan_padded_step(b, step_padding, graphs, kv.n_pad_slots());
      check(planned && *planned == key,
            "decode warm-up: a step built for {}x{} would not run padded to that shape", key.rows,
            key.table_cols);
      model.forward(tokens, b, logit_rows, kv, step_padding);
      ++out.steps;
      if (progress) progress(done, total);
    }
  }
  ops.synchronize();
  out.captures = static_cast<int32_t>(model.step_stats().n_graph_captures - captures_before);
  return out;
}

}  // namespace detllm
