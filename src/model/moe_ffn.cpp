// The mixture-of-experts MLP (see moe_ffn.h).
#include "model/moe_ffn.h"

#include <algorithm>

#include "core/error.h"

namespace detllm {

MoeFfn::MoeFfn(const ModelConfig& config, kernels::Ops& ops) : config_(config), ops_(ops) {
  const DType in = ops.gemm_input_dtype();
  check(in == DType::kF32 || in == DType::kBF16,
        "mixture of experts: backend {} has GEMM inputs of {} (fp32 or bf16 supported)",
        ops.name(), dtype_name(in));
}

void MoeFfn::record_routing(const int32_t* chosen, int32_t n, int32_t layer_index) {
  const size_t k = static_cast<size_t>(config_.moe.n_experts_used);
  const size_t width = static_cast<size_t>(config_.n_layers) * k;
  if (layer_index == 0) {
    routed_.resize(static_cast<size_t>(n) * width);
    routed_rows_ = n;
  }
  check(n == routed_rows_, "routed experts: layer {} ran {} rows, layer 0 {}", layer_index, n,
        routed_rows_);
  for (size_t t = 0; t < static_cast<size_t>(n); ++t) {
    std::copy_n(chosen + t * k, k, routed_.data() + t * width + layer_index * k);
  }
}

void MoeFfn::grow(int32_t n) {
  if (n <= capacity_) return;
  const MoeConfig& m = config_.moe;
  const size_t un = static_cast<size_t>(std::max(n, 2 * capacity_));
  const size_t uk = un * static_cast<size_t>(m.n_experts_used);
  const size_t dim = static_cast<size_t>(config_.dim), f = sizeof(float);
  const size_t ffn = static_cast<size_t>(m.expert_ffn_dim);
  const size_t shared = static_cast<size_t>(m.shared_expert_ffn_dim);
  logits_ = {ops_, un * static_cast<size_t>(m.n_experts) * f};
  experts_ = {ops_, uk * sizeof(int32_t)};
  weights_ = {ops_, uk * f};
  src_row_ = {ops_, uk * sizeof(int32_t)};
  rows_ = {ops_, uk * sizeof(int32_t)};
  const size_t in = dtype_size(ops_.gemm_input_dtype());
  xs_ = {ops_, uk * dim * in};
  gate_up_ = {ops_, std::max(uk * 2 * ffn, un * 2 * shared) * f};
  h_ = {ops_, std::max(uk * ffn, un * shared) * in};
  ys_ = {ops_, uk * dim * f};
  if (shared > 0) {
    shared_ = {ops_, un * dim * f};
    shared_g_ = {ops_, un * f};
  }
  capacity_ = static_cast<int32_t>(un);
}

std::span<const int32_t> MoeFfn::routed(int32_t row) const {
  check(row >= 0 && row < routed_rows_, "routed experts: row {} outside the step's {} rows", row,
        routed_rows_);
  const size_t width = static_cast<size_t>(config_.n_layers) * config_.moe.n_experts_used;
  return std::span<const int32_t>(routed_).subspan(static_cast<size_t>(row) * width, width);
}

void MoeFfn::forward(const void* x, int32_t n, int32_t layer_index, const MoeLayerView& l,
                     float* out, NumericsMode numerics) {
  const MoeConfig& m = config_.moe;
  const int32_t k = m.n_experts_used, n_experts = m.n_experts, dim = config_.dim;
  const int32_t ffn = m.expert_ffn_dim;
  grow(n);
  // Routing: the router is one more projection (the same invariant GEMM), top-k per row.
  ops_.matmul_rounded(x, n, l.router, nullptr, logits_.f32(), n_experts, numerics);
  ops_.moe_route(logits_.f32(), n, n_experts, k, m.renormalize, experts_.i32(), weights_.f32());
  // The chosen experts on the host: in place on a host backend, else one download (n k ids).
  const int32_t nk = n * k;
  const int32_t* chosen = experts_.i32();
  if (!ops_.host_memory()) {
    chosen_host_.resize(static_cast<size_t>(nk));
    ops_.download(chosen_host_.data(), experts_.data(), sizeof(int32_t) * nk);
    chosen = chosen_host_.data();
  }
  record_routing(chosen, n, layer_index);

  // Group the (token, rank) pairs by expert, tokens in order within a group (counting sort on
  // the host). The order within a group changes no bit.
  offsets_.assign(static_cast<size_t>(n_experts) + 1, 0);
  for (int32_t i = 0; i < nk; ++i) ++offsets_[static_cast<size_t>(chosen[i]) + 1];
  for (int32_t e = 0; e < n_experts; ++e) offsets_[e + 1] += offsets_[e];
  cursor_.assign(offsets_.begin(), offsets_.end() - 1);
  int32_t* src_row = src_row_.i32();
  int32_t* rows = rows_.i32();
  if (!ops_.host_memory()) {
    src_row_host_.resize(static_cast<size_t>(nk));
    rows_host_.resize(static_cast<size_t>(nk));
    src_row = src_row_host_.data();
    rows = rows_host_.data();
  }
  for (int32_t i = 0; i < nk; ++i) {
    const int32_t row = cursor_[static_cast<size_t>(chosen[i])]++;
    src_row[row] = i / k;
    rows[i] = row;
  }
  if (!ops_.host_memory()) {
    ops_.upload(src_row_.data(), src_row, sizeof(int32_t) * nk);
    ops_.upload(rows_.data(), rows, sizeof(int32_t) * nk);
  }

  // The experts: each group through its expert's SwiGLU MLP.
  ops_.gather_rows_rounded(x, dim, src_row_.i32(), nk, xs_.data());
  float* gate_up = gate_up_.f32();
  if (!l.gate_up.empty()) {  // each expert's [gate; up] fused: one grouped GEMM
    ops_.matmul_grouped(xs_.data(), offsets_.data(), n_experts, l.gate_up.data(), gate_up,
                        2 * ffn, numerics);
  } else {
    ops_.matmul_grouped(xs_.data(), offsets_.data(), n_experts, l.gate.data(), gate_up, 2 * ffn,
                        numerics);
    ops_.matmul_grouped(xs_.data(), offsets_.data(), n_experts, l.up.data(), gate_up + ffn,
                        2 * ffn, numerics);
  }
  ops_.silu_mul_rows(gate_up, nk, ffn, h_.data());
  ops_.matmul_grouped(h_.data(), offsets_.data(), n_experts, l.down.data(), ys_.f32(), dim, numerics);

  // Qwen2-MoE's shared expert on every token, and its gate logit.
  const float* shared = nullptr;
  const float* shared_g = nullptr;
  if (m.shared_expert_ffn_dim > 0) {
    const int32_t fs = m.shared_expert_ffn_dim;
    ops_.matmul_rounded(x, n, l.shared_gate, nullptr, gate_up, 2 * fs, numerics);
    ops_.matmul_rounded(x, n, l.shared_up, nullptr, gate_up + fs, 2 * fs, numerics);
    ops_.silu_mul_rows(gate_up, n, fs, h_.data());
    ops_.matmul_rounded(h_.data(), n, l.shared_down, nullptr, shared_.f32(), dim, numerics);
    ops_.matmul_rounded(x, n, l.shared_expert_gate, nullptr, shared_g_.f32(), 1, numerics);
    shared = shared_.f32();
    shared_g = shared_g_.f32();
  }
  ops_.moe_combine(ys_.f32(), rows_.i32(), weights_.f32(), n, k, dim, shared, shared_g, out);
}

}  // namespace detllm
