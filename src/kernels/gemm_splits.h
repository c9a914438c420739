// The invariant CUDA GEMM's K-split rule, host side (kernels/cuda/gemm.cu runs it; the
// reduction-order analyzer, verify/reduction_order, reads the same functions): an output
// element's K range is cut into S splits of k / S, S a function of the weight shape (n, k)
// alone — never of M — each split a k16 MMA chain in ascending k from zero, the splits merged
// left to right. Host logic only, no CUDA header, so CPU builds and CI can analyze it.
#pragma once

#include <cstdint>

namespace detllm::kernels {

inline constexpr int kGemmSplitAlign = 256;  // split boundaries are multiples of every BK
inline constexpr int kGemmMaxSplits = 8;

// The fixed K-split count of a weight shape (n = out features, k = in features): a function
// of (n, k) alone — part of the numerics, never of M or the GPU's occupancy.
int gemm_split_count(int64_t n, int64_t k);
// The split count used: gemm_split_count, or an experiment's override (> 0, when k allows it:
// k a multiple of override · kGemmSplitAlign). An override changes the numerics; it exists
// only to measure the design choice (benchmarks).
int gemm_effective_splits(int64_t n, int64_t k, int splits_override);
// Whether the invariant GEMM handles this weight shape (k % 8 == 0).
bool gemm_shape_supported(int64_t n, int64_t k);

}  // namespace detllm::kernels
