// Launchers of the FP8 kernels added after cuda_kernels.h's (kept apart so that a new one does
// not recompile every .cu file). Device pointers; shapes in comments.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm::kernels::cuda {

// launch_fp8_quantize_rows (cuda_kernels.h) with a matrix's activation parameters: params
// (device memory) nullptr — the dynamic per-row scale — or {input_scale, act_bound}
// (kernels/fp8_device_matrix.h): input_scale > 0 is every row's scale (q = e4m3(x / input_scale),
// scale[r] = input_scale); else amax capped at act_bound when > 0, scale = amax / 448 (1 when 0).
// Row-local either way (kernels/ref/fp8_linear.h fp8_activation_scale is the rule).
cudaError_t launch_fp8_quantize_rows_params(const void* x, bool x_bf16, int32_t m, int64_t k,
                                            const float* params, uint8_t* q, float* scale,
                                            cudaStream_t stream);

}  // namespace detllm::kernels::cuda
