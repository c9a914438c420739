// A synthetic decode step for the GPU benchmarks (cuda_e2e_bench, cuda_step_profile_bench,
// cuda_verify_cost_bench): `batch` sequences whose next token is at position `context`, each
// owning its own KV blocks (contents: zeros); the step writes K/V at `context`. Optionally a
// prompt chunk beside them (a mixed step), or `window` tokens per sequence at positions
// context … context + window − 1, each a logit row (a speculative verify step) — as one chunk
// of its sequence, or with window_rows as the engine verifies windows where decode steps are
// padded: each window token on a block-table row of its own (a copy of its sequence's), so the
// step is a decode step of batch · window rows, padded to a row bucket and replayed from a
// graph (docs/speculative.md). Times LlamaModel::forward over it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "kernels/sampling/sample_row.h"
#include "model/kv_storage.h"
#include "model/llama_model.h"
#include "model/step_padding.h"

namespace detllm::bench_util {

using kernels::Ops;
using kernels::StepBatch;
constexpr int32_t kBlock = 16;

class DecodeStep {
 public:
  using Clock = std::chrono::steady_clock;
  // prefill > 0: one more sequence's first `prefill` tokens (positions 0…prefill − 1) after the
  // decode rows, in the same step — a mixed step, as the engine schedules a prompt chunk beside
  // the running sequences under load. Its last token's logits are a logit row too.
  // window > 1: each sequence's next `window` tokens (a verify step), every one a logit row;
  // window_rows: each of them on a table row of its own (decode rows).
  DecodeStep(Ops& ops, const ModelConfig& c, int batch, int context, int prefill = 0,
             int window = 1, bool window_rows = false)
      : blocks_per_seq_(
            std::max((context + window + kBlock - 1) / kBlock, (prefill + kBlock - 1) / kBlock)),
        kv_(ops, c, (batch + (prefill > 0 ? 1 : 0)) * blocks_per_seq_, kBlock, max_pad_rows()) {
    const int n_seqs = batch + (prefill > 0 ? 1 : 0);
    tables_.resize(static_cast<size_t>(n_seqs) * blocks_per_seq_);
    std::iota(tables_.begin(), tables_.end(), 0);
    for (int s = 0; s < batch; ++s) {
      for (int w = 0; w < window; ++w) {
        const int pos = context + w;
        rows_.push_back(static_cast<int32_t>(tokens_.size()));
        tokens_.push_back(
            static_cast<int32_t>((uint64_t{2654435761u} * (s + 1) + w) % c.vocab_size));
        positions_.push_back(pos);
        seqs_.push_back(s);
        slots_.push_back(tables_[static_cast<size_t>(s) * blocks_per_seq_ + pos / kBlock] * kBlock +
                         pos % kBlock);
      }
    }
    for (int i = 0; i < prefill; ++i) {
      tokens_.push_back(static_cast<int32_t>((uint64_t{40503u} * (i + 7)) % c.vocab_size));
      positions_.push_back(i);
      seqs_.push_back(batch);
      slots_.push_back(tables_[static_cast<size_t>(batch) * blocks_per_seq_ + i / kBlock] * kBlock +
                       i % kBlock);
    }
    if (prefill > 0) rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
    int32_t n_table_rows = n_seqs;
    if (window_rows && prefill == 0) {  // row t: a copy of its sequence's table row
      std::vector<int32_t> rows_tables;
      for (int32_t& s : seqs_) {
        const auto row = tables_.begin() + static_cast<ptrdiff_t>(s) * blocks_per_seq_;
        rows_tables.insert(rows_tables.end(), row, row + blocks_per_seq_);
        s = static_cast<int32_t>(&s - seqs_.data());
      }
      tables_ = std::move(rows_tables);
      n_table_rows = static_cast<int32_t>(seqs_.size());
    }
    batch_ = {static_cast<int32_t>(tokens_.size()),
              positions_.data(),
              seqs_.data(),
              slots_.data(),
              n_table_rows,
              blocks_per_seq_,
              tables_.data()};
  }
  // The step's logit rows: every decode row (window of them per sequence), then the prefill's
  // last token.
  std::span<const int32_t> logit_rows() const { return rows_; }
  // Mean ms of `steps` forwards after `warmup` ones; forward() ends with a blocking download.
  double time_ms(const LlamaModel& m, std::span<const int32_t> rows, GraphMode graphs, int warmup,
                 int steps) {
    std::vector<float> logits;
    for (int i = 0; i < warmup; ++i) m.forward(tokens_, batch_, rows, kv_, logits, graphs);
    m.ops().synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) m.forward(tokens_, batch_, rows, kv_, logits, graphs);
    m.ops().synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  }
  // Mean ms of `steps` forwards enqueued back to back, the logits left on the device and read by
  // no one, one synchronize at the end: the step's device time where the host keeps ahead (what
  // a loop of graph replays without a host round trip measures), for comparison with the
  // blocking steps above.
  double time_enqueued_ms(const LlamaModel& m, std::span<const int32_t> rows, GraphMode graphs,
                          int warmup, int steps) {
    for (int i = 0; i < warmup; ++i) (void)m.forward(tokens_, batch_, rows, kv_, graphs);
    m.ops().synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) (void)m.forward(tokens_, batch_, rows, kv_, graphs);
    m.ops().synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  }
  // The same with the logits left on the device and every row sampled there in one
  // Ops::sample_rows call (temperature 0.8, top-p 0.95, seeded): only the results come back.
  // greedy: temperature 0 (the argmax and its logprob); else temperature 0.8, top-p 0.95.
  double time_sampled_ms(const LlamaModel& m, std::span<const int32_t> rows, GraphMode graphs,
                         int warmup, int steps, bool greedy = false) {
    DrawParams p;
    p.temperature = greedy ? 0.0f : 0.8f;
    p.top_p = greedy ? 1.0f : 0.95f;
    p.seed = 1;
    std::vector<SampleRowParams> params;
    for (size_t i = 0; i < rows.size(); ++i) {
      params.push_back(
          sample_row_params(p, static_cast<uint32_t>(positions_[0] + 1), static_cast<uint32_t>(i)));
    }
    std::vector<SampleRowResult> out(rows.size());
    auto step = [&] {
      const LlamaModel::StepLogits l = m.forward(tokens_, batch_, rows, kv_, graphs);
      m.ops().sample_rows(l.data, l.n_rows, l.vocab, params.data(), out.data());  // blocks
    };
    for (int i = 0; i < warmup; ++i) step();
    m.ops().synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    m.ops().synchronize();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
  }
  const StepBatch& batch() const { return batch_; }
  // The step's GEMM numerics (StepBatch::numerics), kInvariant unless set.
  void set_numerics(NumericsMode numerics) { batch_.numerics = numerics; }
  std::span<const int32_t> tokens() const { return tokens_; }
  KvStorage& kv() { return kv_; }

 private:
  int32_t blocks_per_seq_;
  KvStorage kv_;
  std::vector<int32_t> tokens_, positions_, seqs_, slots_, tables_, rows_;
  StepBatch batch_;
};

// One prompt of `tokens` tokens prefilled in one step (positions 0…tokens-1 of one sequence,
// the last row's logits wanted) with `numerics`, eager: mean ms of `steps` after `warmup`.
inline double prefill_ms(Ops& ops, const LlamaModel& m, const ModelConfig& c, int tokens,
                         int warmup, int steps, NumericsMode numerics = NumericsMode::kInvariant) {
  const int32_t n_blocks = (tokens + kBlock - 1) / kBlock;
  KvStorage kv(ops, c, n_blocks, kBlock);
  std::vector<int32_t> ids(static_cast<size_t>(tokens)), pos(ids.size()), seq(ids.size(), 0),
      slots(ids.size()), table(static_cast<size_t>(n_blocks));
  for (int t = 0; t < tokens; ++t) {
    ids[size_t(t)] = static_cast<int32_t>((uint64_t{2654435761u} * (t + 1)) % c.vocab_size);
    pos[size_t(t)] = t;
    slots[size_t(t)] = t;
  }
  std::iota(table.begin(), table.end(), 0);
  StepBatch batch{tokens, pos.data(), seq.data(), slots.data(), 1, n_blocks, table.data()};
  batch.numerics = numerics;
  const std::vector<int32_t> last = {tokens - 1};
  std::vector<float> logits;
  for (int i = 0; i < warmup; ++i) m.forward(ids, batch, last, kv, logits);
  ops.synchronize();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) m.forward(ids, batch, last, kv, logits);
  ops.synchronize();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
}

}  // namespace detllm::bench_util
