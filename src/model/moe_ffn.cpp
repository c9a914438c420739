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

void MoeFfn::record_routing(int32_t n, int32_t layer_index) {
  const size_t k = static_cast<size_t>(config_.moe.n_experts_used);
  const size_t width = static_cast<size_t>(config_.n_layers) * k;
  if (layer_index == 0) {
    routed_.resize(static_cast<size_t>(n) * width);
    routed_rows_ = n;
  }
  check(n == routed_rows_, "routed experts: layer {} ran {} rows, layer 0 {}", layer_index, n,
        routed_rows_);
  if (ops_.host_memory()) {
    const int32_t* chosen = experts_.i32();
    for (size_t t = 0; t < static_cast<size_t>(n); ++t)
      std::copy_n(chosen + t * k, k, routed_.data() + t * width + layer_index * k);
    return;
  }
  // Device memory: each layer's (n, k) into its columns of the step's (n, n_layers, k) table,
  // which comes down once, after the last layer.
  ops_.copy_rows(routed_dev_.i32() + layer_index * k, width * sizeof(int32_t), experts_.data(),
                 k * sizeof(int32_t), k * sizeof(int32_t), n);
  if (layer_index == config_.n_layers - 1)
    ops_.download(routed_.data(), routed_dev_.data(), routed_.size() * sizeof(int32_t));
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
  if (!ops_.host_memory()) {
    offsets_dev_ = {ops_, (static_cast<size_t>(m.n_experts) + 1) * sizeof(int32_t)};
    routed_dev_ = {ops_, uk * static_cast<size_t>(config_.n_layers) * sizeof(int32_t)};
  }
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
  // Group the (token, rank) pairs by expert, pairs in order within a group (the order changes
  // no bit). A host backend groups in place and hands the GEMM host offsets; a device backend
  // groups on the device and its grouped GEMM reads the offsets there, so nothing comes back
  // but the routed experts, once a step.
  const int32_t nk = n * k;
  const bool host = ops_.host_memory();
  if (host) offsets_.resize(static_cast<size_t>(n_experts) + 1);
  int32_t* offsets = host ? offsets_.data() : offsets_dev_.i32();
  ops_.moe_group(experts_.i32(), n, k, n_experts, offsets, src_row_.i32(), rows_.i32());
  record_routing(n, layer_index);
  const auto grouped = [&](const void* in, const kernels::WeightMatrix* w, float* y, int64_t ldy) {
    if (host) {
      ops_.matmul_grouped(in, offsets, n_experts, w, y, ldy, numerics);
    } else {
      ops_.matmul_grouped_device(in, offsets, n_experts, nk, w, y, ldy, numerics);
    }
  };

  // The experts: each group through its expert's SwiGLU MLP.
  ops_.gather_rows_rounded(x, dim, src_row_.i32(), nk, xs_.data());
  float* gate_up = gate_up_.f32();
  if (!l.gate_up.empty()) {  // each expert's [gate; up] fused: one grouped GEMM
    grouped(xs_.data(), l.gate_up.data(), gate_up, 2 * ffn);
  } else {
    grouped(xs_.data(), l.gate.data(), gate_up, 2 * ffn);
    grouped(xs_.data(), l.up.data(), gate_up + ffn, 2 * ffn);
  }
  ops_.silu_mul_rows(gate_up, nk, ffn, h_.data());
  grouped(h_.data(), l.down.data(), ys_.f32(), dim);

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
