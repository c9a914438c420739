// Test-only FP8 kernels (compiled into test_cuda, never into the library): the device codec on
// arbitrary values, and the FP8 GEMM's negative control — the kernel of
// kernels/cuda/fp8_gemm.cuh instantiated with its K range cut in two chains added at the end,
// chosen for m > 64 only (a split picked from the batch size: what the invariance test must
// catch, CudaFp8.NegativeControlSplitByMIsCaught).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm::kernels::cuda_testing {

// codes (n) = the device encoder of x (n); values (256) = the device decoder of every code.
// Synchronous, default stream.
cudaError_t fp8_codec_on_device(const float* x, int64_t n, uint8_t* codes, float* values);

// launch_fp8_gemm's arguments without bias or variant (one tile of its own); m > 64 runs the
// split control, m ≤ 64 the library's numerics. Synchronous, default stream.
cudaError_t launch_fp8_gemm_split_by_m(const uint8_t* xq, const float* x_scale, int32_t m,
                                       const uint8_t* w, const float* w_scale, int64_t n,
                                       int64_t k, float* y);

}  // namespace detllm::kernels::cuda_testing
