// The name of the CUDA FP8 linear's arithmetic, for the fingerprint's backend build string: the
// activations are the bf16 GEMM inputs quantized per token, and the GEMM is the FP8 wgmma kernel
// (split in k per shape) at every m, another summation than the CPU's FP8 reference, so CPU-FP8
// and CUDA-FP8 are different classes. A header without CUDA types (backends.cpp reads it).
#pragma once

#include <string>

#include "core/dtype.h"

namespace detllm::kernels {

// CudaOptions::fp8_wg_splits of every served model: each shape's own split count (-1).
inline constexpr int kCudaFp8DefaultSplits = -1;

// "fp8-gemm=x-bf16/token;<rule>" for per-channel weights: with wg_splits < 0 (the default) the
// split-K rule with per-shape split counts, S > 1 the split-K rule and S, 0 or 1 the unsplit
// wgmma GEMM's kFp8GemmWgNumericsRule; for 128-column block scales (weights kF8E4M3B128 /
// kF8E4M3G128, fp8_launch.h) their block rules. Defined in cuda_ops.cpp.
std::string cuda_fp8_gemm_rule(int wg_splits = kCudaFp8DefaultSplits,
                               DType weights = DType::kF8E4M3);

}  // namespace detllm::kernels
