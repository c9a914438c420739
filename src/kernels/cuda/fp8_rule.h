// The name of the CUDA FP8 linear's arithmetic, for the fingerprint's backend build string: the
// activations are the bf16 GEMM inputs quantized per token, and the GEMM is the FP8 wgmma kernel
// at every m (kFp8GemmWgNumericsRule), another summation than the CPU's FP8 reference, so CPU-FP8
// and CUDA-FP8 are different classes. A header without CUDA types (backends.cpp reads it).
#pragma once

#include <string>

#include "core/dtype.h"

namespace detllm::kernels {

// "fp8-gemm=x-bf16/token;<kFp8GemmWgNumericsRule>" for per-channel weights; with
// CudaOptions::fp8_wg_splits > 1 (an experiment: no CLI setting reaches it) the split-K rule and
// its split count; for 128-column block scales (weights kF8E4M3B128 / kF8E4M3G128, fp8_launch.h)
// their block rules. Defined in cuda_ops.cpp.
std::string cuda_fp8_gemm_rule(int wg_splits = 0, DType weights = DType::kF8E4M3);

}  // namespace detllm::kernels
