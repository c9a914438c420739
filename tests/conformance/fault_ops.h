// Negative controls: CPU backends with one planted fault each — the smallest change (one ulp)
// that a real kernel or cache bug of that kind makes — so that the conformance checks can be
// shown to catch it. Each targets one variation (negative_control_test.cpp: that variation's
// guarantee-matrix cell FAILS); the suite tests each fails in all are listed in README.md:
//
//   fault              what differs                                   targets
//   batch-matmul       matmul rows when the call has > 1 row          V1
//   qlen-attention     attention rows of a sequence with > 1 query    V3 (and V4)
//                      row in the call (query-length dependent)
//   layout-attention   attention rows whose own KV block has an odd   V7
//                      physical id (page-layout dependent)
//   kv-reuse           the K of prefix-cache blocks, one ulp up when  V5
//                      a sequence reuses them
//   recompute          attention rows that recompute positions of a   V6
//                      preempted sequence
//   graph-replay       a step replayed from a (CPU-emulated) graph    V8 (every test with
//                                                                     replays: graphs are on
//                                                                     by default where the
//                                                                     backend has them)
//   threads            rmsnorm when the backend has > 1 thread        V11
//   moe-group-matmul   the experts' grouped GEMM, rows of groups      V1 (MoE models)
//                      of > 1 row (group-size dependent)
//   moe-tie-arrival    MoE routing ties broken by arrival order (a    V2, V3 (MoE models)
//                      scan starting at the token's row in the step)
//   fp8-batch-scale    FP8 matmuls with one activation scale for the  V1 (FP8 models)
//                      whole call (max over every row: the per-tensor
//                      dynamic scale config_fp8.cpp refuses)
//   fp8-kv-live-scale  an FP8 KV cache whose scales come from the     V1
//                      call's own K/V (a live batch), not from load
//
// `graph-replay` gives the CPU a GraphCapture that records ops closures and replays them
// (what a CUDA graph does, on host memory); `graph-replay-exact` is the same without the fault,
// the control that shows the emulation itself changes no bit. make_fault_ops(name) builds
// one; conformance_test.cpp uses it when DETLLM_CONFORMANCE_FAULT names a fault, so the whole
// suite can be run against each.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "conformance/delegating_ops.h"
#include "core/error.h"
#include "core/fp8.h"
#include "verify/conformance.h"

namespace detllm::conformance {

// matmul nudges every output by one ulp when the call has more than one row — like a GEMM that
// switches to split-K at larger M.
class BatchDependentMatmulOps final : public DelegatingOps {
 public:
  explicit BatchDependentMatmulOps(int n_threads)
      : DelegatingOps(n_threads, "fault:batch-matmul") {}
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    inner_->matmul(x, m, w, bias, y, numerics);
    if (m > 1) nudge(y, int64_t{m} * w.rows);
  }
};

// Attention whose result depends on the number of query rows its sequence has in the call
// (like a kernel whose row sum follows the query tile's layout, design.md section 6).
class QueryLengthAttentionOps final : public DelegatingOps {
 public:
  explicit QueryLengthAttentionOps(int n_threads)
      : DelegatingOps(n_threads, "fault:qlen-attention") {}
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
    std::vector<int32_t> rows_of_seq(static_cast<size_t>(b.n_seqs), 0);
    for (int32_t t = 0; t < b.n_tokens; ++t) ++rows_of_seq[static_cast<size_t>(b.seq_of_token[t])];
    const int64_t row = int64_t{h} * c.head_dim;
    for (int32_t t = 0; t < b.n_tokens; ++t) {
      if (rows_of_seq[static_cast<size_t>(b.seq_of_token[t])] > 1) nudge(out + t * row, row);
    }
  }
};

// Attention whose result depends on the physical page of the row's own position (like a
// kernel that takes another path for odd blocks).
class LayoutAttentionOps final : public DelegatingOps {
 public:
  explicit LayoutAttentionOps(int n_threads) : DelegatingOps(n_threads, "fault:layout-attention") {}
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
    const int64_t row = int64_t{h} * c.head_dim;
    for (int32_t t = 0; t < b.n_tokens; ++t) {
      const int32_t block =
          b.block_tables[int64_t{b.seq_of_token[t]} * b.max_blocks + b.positions[t] / c.block_size];
      if (block % 2 == 1) nudge(out + t * row, row);
    }
  }
};

// Reused KV one ulp off: when a sequence is admitted with a prefix-cache hit, the K of the
// positions it reuses is moved one ulp up in every layer before its first chunk reads it (a
// cache that stores or restores KV in another precision or order than it computes it).
class KvReuseOps final : public DelegatingOps, public StepListener {
 public:
  explicit KvReuseOps(int n_threads) : DelegatingOps(n_threads, "fault:kv-reuse") {}
  void on_step(const StepInfo& step) override {
    slots_.clear();
    for (size_t k = 0; k < step.seqs.size(); ++k) {
      const StepSeqInfo& s = step.seqs[k];
      if (s.n_cached_tokens == 0 || s.first_pos != s.n_cached_tokens) continue;
      const int32_t bs = step.block_size;
      for (int32_t p = 0; p < s.n_cached_tokens; ++p) {
        const int32_t block =
            step.plan.block_tables[static_cast<int64_t>(k) * step.plan.max_blocks + p / bs];
        slots_.push_back(block * bs + p % bs);
      }
    }
  }
  void kv_append(const float* k, const float* v, const kernels::StepBatch& b,
                 const kernels::KvCacheLayer& c) override {
    inner_->kv_append(k, v, b, c);
    const int64_t row = int64_t{c.n_kv_heads} * c.head_dim;
    float* k_pool = static_cast<float*>(c.k);  // fp32: the CPU backends' KV dtype
    for (int32_t slot : slots_) nudge(k_pool + slot * row, row);
  }

 private:
  std::vector<int32_t> slots_;  // this step's reused positions (slots), nudged in every layer
};

// Recompute that differs: attention rows that recompute positions a preempted sequence had
// already computed (its prompt and generated tokens) move one ulp.
class RecomputeOps final : public DelegatingOps, public StepListener {
 public:
  explicit RecomputeOps(int n_threads) : DelegatingOps(n_threads, "fault:recompute") {}
  void on_step(const StepInfo& step) override {
    rows_.clear();
    for (const StepSeqInfo& s : step.seqs) {
      if (s.n_preemptions == 0) continue;
      for (int32_t i = 0; i < s.n_tokens; ++i) {
        if (s.first_pos + i < s.n_seq_tokens - 1) rows_.push_back(s.token_begin + i);
      }
    }
  }
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    inner_->attention(q, c, b, h, s, out);
    const int64_t row = int64_t{h} * c.head_dim;
    for (int32_t t : rows_) {
      if (t < b.n_tokens) nudge(out + t * row, row);
    }
  }

 private:
  std::vector<int32_t> rows_;  // this step's recompute rows
};

// Graphs on the CPU: begin_capture() records every op as a closure over its arguments (host
// pointers, like a CUDA graph's kernel arguments) instead of running it; replay() runs them.
// With `fault`, a replayed matmul moves its outputs one ulp: a graph replay that differs from
// the eager run it was captured from.
class CpuGraphOps final : public DelegatingOps, public kernels::GraphCapture {
 public:
  CpuGraphOps(int n_threads, bool fault)
      : DelegatingOps(n_threads, fault ? "fault:graph-replay" : "cpu-graphs"), fault_(fault) {}
  kernels::GraphCapture* graph_capture() override { return this; }

  void embedding(const kernels::WeightMatrix& t, const int32_t* ids, int32_t n,
                 float* out) override {
    run([=, this] { inner_->embedding(t, ids, n, out); });
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    run([=, this] { inner_->rmsnorm(x, w, n, dim, eps, out); });
  }
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    run([=, this] {
      inner_->matmul(x, m, w, bias, y, numerics);
      if (replaying_ && fault_) nudge(y, int64_t{m} * w.rows);
    });
  }
  void rope(float* x, int32_t n, int32_t h, int32_t d, const int32_t* pos,
            const kernels::RopeTable& t) override {
    const kernels::RopeTable* table = &t;  // the model's, at a fixed address (no copy)
    run([=, this] { inner_->rope(x, n, h, d, pos, *table); });
  }
  void kv_append(const float* k, const float* v, const kernels::StepBatch& b,
                 const kernels::KvCacheLayer& c) override {
    run([=, this] { inner_->kv_append(k, v, b, c); });
  }
  void attention(const float* q, const kernels::KvCacheLayer& c, const kernels::StepBatch& b,
                 int32_t h, float s, float* out) override {
    run([=, this] { inner_->attention(q, c, b, h, s, out); });
  }
  void silu_mul(const float* g, const float* u, int64_t n, float* out) override {
    run([=, this] { inner_->silu_mul(g, u, n, out); });
  }
  void add(float* x, const float* y, int64_t n) override {
    run([=, this] { inner_->add(x, y, n); });
  }
  void gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                   float* out) override {
    run([=, this] { inner_->gather_rows(x, dim, rows, n_rows, out); });
  }
  // The fused ops run as their defaults (the op sequences above, on host scratch), recorded
  // whole: their copies into scratch are not ops of their own and must run at replay too.
  void matmul_rounded(const void* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
                      float* y, int64_t ldy, NumericsMode numerics) override {
    run([=, this] { Ops::matmul_rounded(x, m, w, bias, y, ldy, numerics); });
  }
  void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                   void* out) override {
    run([=, this] { Ops::add_rmsnorm(x, y, w, n, dim, eps, out); });
  }
  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const kernels::RopeTable& t,
                       const kernels::StepBatch& b, const kernels::KvCacheLayer& c,
                       float* q_out) override {
    const kernels::RopeTable* table = &t;  // the model's, at a fixed address (no copy)
    run([=, this] {
      Ops::qkv_rope_append(qkv, n, n_heads, q_norm, k_norm, eps, *table, b, c, q_out);
    });
  }
  void attention_rounded(const float* q, const kernels::KvCacheLayer& c,
                         const kernels::StepBatch& b, int32_t h, float s, void* out) override {
    run([=, this] { Ops::attention_rounded(q, c, b, h, s, out); });
  }
  void silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) override {
    run([=, this] { Ops::silu_mul_rows(gate_up, n, ffn, out); });
  }

  // ---- GraphCapture ----
  void begin_capture() override {
    check(!capturing_, "CpuGraphOps: capture already begun");
    capturing_ = true;
    recorded_.clear();
  }
  std::unique_ptr<kernels::OpsGraph> end_capture() override {
    capturing_ = false;
    auto g = std::make_unique<Graph>();
    g->ops = std::move(recorded_);
    recorded_.clear();
    return g;
  }
  void abort_capture() override {
    capturing_ = false;
    recorded_.clear();
  }
  void replay(const kernels::OpsGraph& graph) override {
    replaying_ = true;
    for (const auto& op : dynamic_cast<const Graph&>(graph).ops) op();
    replaying_ = false;
    ++n_replays_;
  }
  bool graph_valid(const kernels::OpsGraph&) const override { return true; }
  void* alloc_pinned(size_t n_bytes) override { return Ops::alloc_bytes(n_bytes); }
  void free_pinned(void* p) override { Ops::free_bytes(p); }

 private:
  struct Graph final : kernels::OpsGraph {
    std::vector<std::function<void()>> ops;
  };
  void run(std::function<void()> op) {
    if (capturing_) {
      recorded_.push_back(std::move(op));
    } else {
      op();
    }
  }
  bool fault_;
  bool capturing_ = false;
  bool replaying_ = false;
  int64_t n_replays_ = 0;
  std::vector<std::function<void()>> recorded_;
};

// rmsnorm (a row reduction) that depends on the thread count, like a reduction split across
// threads and merged in thread order.
class ThreadDependentOps final : public DelegatingOps {
 public:
  explicit ThreadDependentOps(int n_threads)
      : DelegatingOps(n_threads, "fault:threads"), n_threads_(n_threads) {}
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    inner_->rmsnorm(x, w, n, dim, eps, out);
    if (n_threads_ > 1) nudge(out, int64_t{n} * dim);
  }

 private:
  int n_threads_;
};

// The experts' grouped GEMM nudges every row of a group of more than one row — like a grouped
// GEMM that picks another tile shape (and K split) when an expert receives more tokens.
class GroupSizeExpertOps final : public DelegatingOps {
 public:
  explicit GroupSizeExpertOps(int n_threads) : DelegatingOps(n_threads, "fault:moe-group-matmul") {}
  void matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                      const kernels::WeightMatrix* w, float* y, int64_t ldy,
                      NumericsMode numerics) override {
    Ops::matmul_grouped(x, offsets, n_groups, w, y, ldy, numerics);
    for (int32_t g = 0; g < n_groups; ++g) {
      if (offsets[g + 1] - offsets[g] <= 1) continue;
      for (int32_t r = offsets[g]; r < offsets[g + 1]; ++r) nudge(y + r * ldy, w[g].rows);
    }
  }
};

// MoE routing whose ties go to the expert met first in a scan that starts at expert
// (token's row in the step) mod n_experts — like a kernel whose lanes visit the experts from a
// per-token offset and keep the first of equal values: ties resolve by arrival order, not by
// index. Equal logits have equal weights, so only the chosen ids differ.
class ArrivalTieRouteOps final : public DelegatingOps {
 public:
  explicit ArrivalTieRouteOps(int n_threads) : DelegatingOps(n_threads, "fault:moe-tie-arrival") {}
  void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                 int32_t* experts, float* weights) override {
    Ops::moe_route(logits, n, n_experts, k, renormalize, experts, weights);
    for (int32_t t = 0; t < n; ++t) {
      const float* l = logits + int64_t{t} * n_experts;
      int32_t* ids = experts + int64_t{t} * k;
      int32_t n_kept = 0;
      for (int32_t i = 0; i < n_experts; ++i) {
        const int32_t j = (t + i) % n_experts;
        int32_t pos = n_kept;
        while (pos > 0 && l[j] > l[ids[pos - 1]]) --pos;
        if (pos >= k) continue;
        for (int32_t q = std::min(n_kept, k - 1); q > pos; --q) ids[q] = ids[q - 1];
        ids[pos] = j;
        if (n_kept < k) ++n_kept;
      }
    }
  }
};

// The faults by name, in the table's order.
// FP8 matmuls (dynamic rows) with ONE activation scale for the whole call: the max |x| over
// every row of the step, as a per-tensor dynamic scale computes it — so a row's rounding, and
// its bits, depend on the rows beside it. The scale is written into a copy of the weight rows
// as their static input_scale, so the CPU kernel itself runs unchanged.
class Fp8BatchScaleOps final : public DelegatingOps {
 public:
  explicit Fp8BatchScaleOps(int n_threads) : DelegatingOps(n_threads, "fault:fp8-batch-scale") {}
  void matmul(const float* x, int32_t m, const kernels::WeightMatrix& w, const float* bias,
              float* y, NumericsMode numerics) override {
    if (!dtype_is_fp8(w.dtype)) return inner_->matmul(x, m, w, bias, y, numerics);
    float a = 0.0f;
    for (int64_t i = 0; i < int64_t{m} * w.cols; ++i) a = std::max(a, std::fabs(x[i]));
    const float s = a == 0.0f ? 1.0f : a / kFp8E4m3Max;
    const int64_t rb = dtype_row_bytes(w.dtype, w.cols);
    std::vector<uint8_t> rows(static_cast<const uint8_t*>(w.data),
                              static_cast<const uint8_t*>(w.data) + w.rows * rb);
    for (int64_t r = 0; r < w.rows; ++r) {
      if (fp8_row_input_scale(rows.data() + r * rb) == 0.0f) std::memcpy(rows.data() + r * rb, &s, 4);
    }
    kernels::WeightMatrix batch = w;
    batch.data = rows.data();
    inner_->matmul(x, m, batch, bias, y, numerics);
  }
};

// An FP8 KV cache (--kv-dtype fp8) whose per-head scales are the amax of the K/V appended in
// this call / 448 — scales from a live batch — instead of the ones fixed at load: a token's
// stored K/V then depends on what else was appended with it.
class Fp8KvLiveScaleOps final : public DelegatingOps {
 public:
  explicit Fp8KvLiveScaleOps(int n_threads)
      : DelegatingOps(kernels::make_cpu_ops(n_threads, CpuActivations::kF32, /*kv_fp8=*/true),
                      "fault:fp8-kv-live-scale") {}
  void kv_append(const float* k, const float* v, const kernels::StepBatch& b,
                 const kernels::KvCacheLayer& c) override {
    if (c.k_scale == nullptr) return inner_->kv_append(k, v, b, c);
    std::vector<float> ks(static_cast<size_t>(c.n_kv_heads), 0.0f), vs = ks;
    for (int32_t t = 0; t < b.n_tokens; ++t) {
      for (int32_t h = 0; h < c.n_kv_heads; ++h) {
        for (int32_t d = 0; d < c.head_dim; ++d) {
          const int64_t i = (int64_t{t} * c.n_kv_heads + h) * c.head_dim + d;
          ks[static_cast<size_t>(h)] = std::max(ks[static_cast<size_t>(h)], std::fabs(k[i]));
          vs[static_cast<size_t>(h)] = std::max(vs[static_cast<size_t>(h)], std::fabs(v[i]));
        }
      }
    }
    for (float& s : ks) s = s == 0.0f ? 1.0f : s / kFp8E4m3Max;
    for (float& s : vs) s = s == 0.0f ? 1.0f : s / kFp8E4m3Max;
    kernels::KvCacheLayer live = c;
    live.k_scale = ks.data();
    live.v_scale = vs.data();
    inner_->kv_append(k, v, b, live);
  }
};

inline std::vector<std::string> fault_names() {
  return {"batch-matmul", "qlen-attention", "layout-attention", "kv-reuse",       "recompute",
          "graph-replay", "threads",        "moe-group-matmul", "moe-tie-arrival",
          "fp8-batch-scale", "fp8-kv-live-scale"};
}

// A backend with fault `name` (fault_names(), or "graph-replay-exact"); throws for another.
inline std::unique_ptr<kernels::Ops> make_fault_ops(std::string_view name, int n_threads) {
  if (name == "batch-matmul") return std::make_unique<BatchDependentMatmulOps>(n_threads);
  if (name == "qlen-attention") return std::make_unique<QueryLengthAttentionOps>(n_threads);
  if (name == "layout-attention") return std::make_unique<LayoutAttentionOps>(n_threads);
  if (name == "kv-reuse") return std::make_unique<KvReuseOps>(n_threads);
  if (name == "recompute") return std::make_unique<RecomputeOps>(n_threads);
  if (name == "graph-replay") return std::make_unique<CpuGraphOps>(n_threads, true);
  if (name == "graph-replay-exact") return std::make_unique<CpuGraphOps>(n_threads, false);
  if (name == "threads") return std::make_unique<ThreadDependentOps>(n_threads);
  if (name == "moe-group-matmul") return std::make_unique<GroupSizeExpertOps>(n_threads);
  if (name == "moe-tie-arrival") return std::make_unique<ArrivalTieRouteOps>(n_threads);
  if (name == "fp8-batch-scale") return std::make_unique<Fp8BatchScaleOps>(n_threads);
  if (name == "fp8-kv-live-scale") return std::make_unique<Fp8KvLiveScaleOps>(n_threads);
  std::string known;
  for (const std::string& n : fault_names()) known += " " + n;
  throw Error(fmt::format("unknown fault '{}': use one of{} or graph-replay-exact", name, known));
}

}  // namespace detllm::conformance
