// attention_negative_control.h: the packed CTA with LD = true, launched like attention_tc.cu's
// launch_tc with every split of a row in its CTA.
#include "cuda/attention_negative_control.h"

#include <cuda_bf16.h>

#include "kernels/cuda/attention_tc_kernel.cuh"

namespace detllm::kernels::cuda_testing {
namespace {

using namespace cuda::tc;

template <int HD>
cudaError_t launch(const cuda::AttentionArgs& a, int tq) {
  constexpr int W = 4, ST = 2;
  const size_t smem = sizeof(__nv_bfloat16) * 2 * ST * kKvTile * (HD + 8);
  constexpr bool kFast = false, kNegativeControl = true;
  const cudaError_t attr = cudaFuncSetAttribute(
      attention_tc_kernel<HD, W, ST, kFast, kNegativeControl>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (attr != cudaSuccess) return attr;
  const dim3 grid((a.n_tokens + tq - 1) / tq, a.n_kv_heads, 1);
  attention_tc_kernel<HD, W, ST, kFast, kNegativeControl>
      <<<grid, W * 32, smem>>>(a, tq, a.scale * kLog2e, nullptr, max_splits_of(a), false);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return cudaDeviceSynchronize();
}

}  // namespace

cudaError_t launch_layout_dependent_attention(const cuda::AttentionArgs& a, int tq) {
  if (a.n_tokens == 0) return cudaSuccess;
  const int n_rep = a.n_kv_heads > 0 ? a.n_heads / a.n_kv_heads : 0;
  if (tq < 1 || n_rep < 1 || tq * n_rep > 4 * kWarpRows) return cudaErrorInvalidValue;
  return with_head_dim(a.head_dim, [&](auto hd) {
    return launch<decltype(hd)::value>(a, tq);
  });
}

}  // namespace detllm::kernels::cuda_testing
