// The mixture-of-experts MLP of a layer (Qwen3-MoE, Mixtral, Qwen2-MoE), on kernels::Ops:
//
//   router logits (n, n_experts) = x · routerᵀ                  the invariant GEMM
//   experts, weights (n, k)      = Ops::moe_route                top-k in fp32, ties → lower index
//   group the (token, rank) pairs by expert:  xs = x[src_row]    rows of expert 0, then 1, …
//   ys = down_e(silu(gate_e xs) * up_e xs)  per expert group     Ops::matmul_grouped
//   out[t] = Σ_r weights[t, r] ys[rows[t, r]]  (+ shared expert) Ops::moe_combine, rank order
//
// Invariance: a token's output depends on its own row alone. Its routing is per row; each
// expert's GEMM gives a row the bits it has alone (the K order is fixed by the weight's shape,
// not by the group size); the combine sums in the fixed rank order, in fp32, with no atomics.
// How many tokens chose an expert, or which, changes the groups' sizes, never a bit.
//
// The groups: on a host backend a counting sort on the host, whose offsets the grouped GEMM
// takes as host memory; on a device backend (CUDA) the grouping runs on the device and the
// grouped GEMM reads its offsets there (Ops::moe_group, Ops::matmul_grouped_device), so a step
// sends nothing to the host but the routed experts, (n, n_layers, k) int32 once after the
// last layer. MoE steps still run eagerly (LlamaModel::graph_capture() is nullptr for MoE
// models): docs/cuda.md "Mixture of experts".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "model/config.h"

namespace detllm {

// One layer's expert weights in backend memory. shared_* have data == nullptr when the
// architecture has no shared expert.
struct MoeLayerView {
  kernels::WeightMatrix router;                       // (n_experts, dim)
  std::vector<kernels::WeightMatrix> gate, up, down;  // (n_experts): (F, dim), (F, dim), (dim, F)
  // (n_experts): (2 F, dim), each expert's [gate; up] in one matrix, when the model fuses
  // projections (device backends); gate and up are then empty. The same bits as apart (a
  // fused projection keeps every output element's K order): one grouped GEMM instead of two.
  std::vector<kernels::WeightMatrix> gate_up;
  kernels::WeightMatrix shared_gate, shared_up;       // (Fs, dim)
  kernels::WeightMatrix shared_down;                  // (dim, Fs)
  kernels::WeightMatrix shared_expert_gate;           // (1, dim)
};

class MoeFfn {
 public:
  MoeFfn(const ModelConfig& config, kernels::Ops& ops);
  MoeFfn(const MoeFfn&) = delete;
  MoeFfn& operator=(const MoeFfn&) = delete;

  // out (n, dim) fp32 = the MLP of layer `layer_index` of x (n, dim) in the backend's GEMM
  // input dtype. Every GEMM runs with `numerics` (the step's). The experts each row chose are
  // kept in routed() (layer 0 starts a new step's table).
  void forward(const void* x, int32_t n, int32_t layer_index, const MoeLayerView& layer, float* out,
               NumericsMode numerics);

  // The last step's routing, on the host: (n, n_layers, k) int32 expert ids, row t of the step
  // then layer, each layer's k ids best first (Ops::moe_route's order). What a caller returns
  // as a token's routed experts (engine Request::return_routed_experts); valid until the next
  // step. Recording it is a copy of k ints per row and layer, beside expert GEMMs of F·dim.
  std::span<const int32_t> routed(int32_t row) const;

 private:
  void grow(int32_t n);
  // Records this layer's chosen experts (experts_) for routed(): on a host backend into
  // routed_; on a device backend into routed_dev_, downloaded into routed_ after the last layer.
  void record_routing(int32_t n, int32_t layer_index);

  const ModelConfig& config_;
  kernels::Ops& ops_;
  int32_t capacity_ = 0;  // tokens
  // Backend memory, sized for capacity_ tokens (F: expert_ffn_dim, Fs: shared_expert_ffn_dim):
  kernels::Buffer logits_;        // (n, n_experts) router logits
  kernels::Buffer experts_;       // (n, k) int32 chosen experts, best first
  kernels::Buffer weights_;       // (n, k) their weights
  kernels::Buffer src_row_;       // (n k) int32: the token of each grouped row
  kernels::Buffer rows_;          // (n, k) int32: the grouped row of (token, rank)
  kernels::Buffer xs_;            // (n k, dim) the tokens' inputs, grouped by expert (GEMM input dtype)
  kernels::Buffer gate_up_;       // (n k, 2 F) then, for the shared expert, (n, 2 Fs)
  kernels::Buffer h_;             // (n k, F) / (n, Fs) in the GEMM input dtype
  kernels::Buffer ys_;            // (n k, dim) the experts' outputs, grouped
  kernels::Buffer shared_;        // (n, dim) the shared expert's output
  kernels::Buffer shared_g_;      // (n) its gate logit
  std::vector<int32_t> offsets_;  // host backends: (n_experts + 1) first grouped row of each expert
  kernels::Buffer offsets_dev_;   // device backends: the same in backend memory
  kernels::Buffer routed_dev_;    // device backends: (n, n_layers, k) the step's chosen experts
  std::vector<int32_t> routed_;   // (n, n_layers, k) host: the last step's chosen experts
  int32_t routed_rows_ = 0;       // n of the last step
};

}  // namespace detllm
