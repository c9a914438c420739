// The small-m GEMM's CTA-wide schedule (gemv_stream.cu), called by launch_gemv (gemv.cu) for
// its configs kGemvWarpConfigs and up. Internal to the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace detllm::kernels::cuda {

// config: 0…kGemvStreamConfigs-1. Needs k % 8 == 0 and the ring to hold two stages of m rows.
bool gemv_stream_supported(int32_t m, int64_t n, int64_t k, int config, bool x_bf16);
cudaError_t launch_gemv_stream(const void* x, bool x_bf16, int32_t m, const uint16_t* w,
                               int64_t n, int64_t k, const float* bias, float* y, int config,
                               bool pdl, cudaStream_t stream);

}  // namespace detllm::kernels::cuda
