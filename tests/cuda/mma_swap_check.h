// A check of the fact the transposed decode warp (attention_tc_decode_nq.cu) stands on: an
// m16n8k16 bf16 product with its operands exchanged, D' = B'·A' (+ Cᵀ), gives the transposed
// result of D = A·B (+ C) bit for bit, also when the product is a chain of k-steps on a nonzero
// accumulator. Random operands (bf16 over a wide exponent range, fp32 C); the control exchanges
// the operands too but runs the k-steps in descending order, which must differ somewhere.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace detllm::kernels::cuda {

struct MmaSwapCounts {
  uint64_t elements = 0;   // compared elements of each kind
  uint64_t zero_c = 0;     // differing elements, C = 0 (the scores Sᵀ = K·Qᵀ)
  uint64_t nonzero_c = 0;  // differing elements, nonzero C (Oᵀ += Vᵀ·Pᵀ)
  uint64_t control = 0;    // differing elements of the control (must be > 0)
};

// `trials` random cases (each an 8 × 16 block of the normal product, two n8 tiles, of a chain
// of two k-steps) from `seed`; synchronous.
cudaError_t mma_swap_check(uint64_t trials, uint64_t seed, MmaSwapCounts* out);

}  // namespace detllm::kernels::cuda
