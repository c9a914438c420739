// GPU tests skip without a usable CUDA device, and say why — unless DETLLM_REQUIRE_GPU=1 (the
// GPU scripts, scripts/gpu/*.sh, set it): then every such skip is a failure, so that a GPU
// machine with a broken driver (cudaGetDeviceCount fails, every test skips) is not a green run.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>

#include "kernels/cuda/cuda_ops.h"

namespace detllm::kernels::cuda_testing {

inline bool gpu_required() {
  const char* v = std::getenv("DETLLM_REQUIRE_GPU");
  return v != nullptr && std::string_view(v) == "1";
}

// Empty when a device is usable; else why not and what to check.
inline std::string gpu_unavailable_reason() {
  if (cuda_device_count() > 0) return {};
  return "no usable CUDA device (cudaGetDeviceCount found none or failed): check nvidia-smi, "
         "the driver and CUDA_VISIBLE_DEVICES";
}

}  // namespace detllm::kernels::cuda_testing

// In a test body or SetUp: skip (with the reason) without a GPU; fail instead when
// DETLLM_REQUIRE_GPU=1.
#define DETLLM_SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                            \
    const std::string detllm_no_gpu_ = ::detllm::kernels::cuda_testing::gpu_unavailable_reason(); \
    if (!detllm_no_gpu_.empty()) {                                                                \
      if (::detllm::kernels::cuda_testing::gpu_required())                                        \
        FAIL() << "DETLLM_REQUIRE_GPU=1 but " << detllm_no_gpu_;                                  \
      GTEST_SKIP() << detllm_no_gpu_ << " (DETLLM_REQUIRE_GPU=1 makes this a failure)";           \
    }                                                                                             \
  } while (0)
