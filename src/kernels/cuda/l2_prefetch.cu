// Bulk L2 prefetches of a weight matrix's row prefixes (weight_prefetch.h). One thread a
// range: a whole matrix in 64 KB ranges, or each row's prefix. cp.async.bulk.prefetch.L2 is a
// hint with no completion: the thread issues it and moves on, the CTA may exit while the L2
// fills. Reads only; writes nothing.
#include <algorithm>

#include "kernels/cuda/weight_prefetch.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int64_t kRange = 64 * 1024;  // bytes of one prefetch of a contiguous matrix
constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 132;  // one a multiprocessor of an H200: the issue is all they do

__device__ inline void prefetch_l2(const char* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// n ranges: range i starts at base + i * stride and is len bytes, the last one last_len.
__global__ void prefetch_kernel(const char* base, int64_t n, int64_t stride, uint32_t len,
                                uint32_t last_len) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    prefetch_l2(base + i * stride, i + 1 == n ? last_len : len);
}

}  // namespace

cudaError_t launch_prefetch_l2(const void* base, int64_t pitch, const PrefetchPlan& plan,
                               cudaStream_t stream) {
  if (plan.bytes() == 0) return cudaSuccess;
  int64_t n, stride;
  uint32_t len, last;
  if (plan.prefix == pitch) {  // the whole matrix: one contiguous range
    const int64_t total = plan.rows * pitch;
    n = (total + kRange - 1) / kRange;
    stride = kRange;
    len = static_cast<uint32_t>(kRange);
    last = static_cast<uint32_t>(total - (n - 1) * kRange);
  } else {
    n = plan.rows;
    stride = pitch;
    len = last = static_cast<uint32_t>(plan.prefix);
  }
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
  prefetch_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const char*>(base), n, stride, len,
                                                   last);
  return cudaGetLastError();
}

}  // namespace detllm::kernels::cuda
