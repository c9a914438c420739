// The invariant CUDA GEMM's K-split rule (gemm_splits.h).
#include "kernels/gemm_splits.h"

namespace detllm::kernels {

// S = 1 for every shape: the K range is one sequential k16 MMA chain, which is also what
// cuBLASLt's unsplit Hopper kernels compute — so the engine can run whichever of them was
// verified bit-equal and is fastest (kernels/cuda/gemm_lt.h). Measured (benchmarks/
// cuda_gemm_lt_bench --splits 1/2/0, docs/cuda.md): with S = 1 the best bit-equal cuBLASLt
// execution is 0.93–1.11× default cuBLAS at every M from 1 to 4096 on Llama-8B's shapes; with
// S = 2 or 4 merging the splits costs up to 20–40% at M ≥ 128. (The own kernel supports S > 1 —
// the splits_override experiments — where splits help its small-M bandwidth.)
int gemm_split_count(int64_t /*n*/, int64_t /*k*/) {
  return 1;
}

bool gemm_shape_supported(int64_t n, int64_t k) {
  return n > 0 && k > 0 && k % 8 == 0;
}

int gemm_effective_splits(int64_t n, int64_t k, int splits_override) {
  if (splits_override == 1) return 1;
  if (splits_override > 1 && splits_override <= kGemmMaxSplits &&
      k % (int64_t{splits_override} * kGemmSplitAlign) == 0)
    return splits_override;
  return gemm_split_count(n, k);
}

}  // namespace detllm::kernels
