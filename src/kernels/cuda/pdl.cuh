// Programmatic dependent launch (PDL, sm_90): a kernel launched with the attribute may be
// scheduled while the kernel before it on the stream is still running, so its launch and
// prologue overlap that kernel's tail instead of following its completion. Rule for every
// kernel launched through launch_pdl: pdl_wait() comes before its first access to global memory
// (read or write): it returns once the previous kernel has completed and its writes are
// visible, so the ordering — and every bit — is that of a plain launch. One exception: the
// weights, which no kernel of a step writes, may be read before it: a PDL kernel starts only once the kernel before it has passed its own
// pdl_wait(), so every kernel two back — a weight update's included, which a step's embedding
// gather always follows — has completed. pdl_release() lets the
// next PDL kernel be scheduled once every CTA of this one has called it (or exited); placed
// after pdl_wait(), at most two grids overlap. Without the attribute both are no-ops.
// Tests: CudaLaunch.ProgrammaticLaunchKeepsEveryBit (same logits on and off, eager and graphs).
#pragma once

#include <cuda_runtime.h>

namespace detllm::kernels::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when pdl, and as
// thread-block clusters of (1, 1, cluster_z) CTAs when cluster_z > 1 (grid.z a multiple of it).
template <typename... Params, typename... Args>
cudaError_t launch_pdl_cluster(bool pdl, unsigned cluster_z, void (*kernel)(Params...), dim3 grid,
                               dim3 block, size_t smem, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attrs[2] = {};
  unsigned n = 0;
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_z > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = 1;
    attrs[n].val.clusterDim.y = 1;
    attrs[n++].val.clusterDim.z = cluster_z;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when pdl.
template <typename... Params, typename... Args>
cudaError_t launch_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, Args... args) {
  return launch_pdl_cluster(pdl, 1, kernel, grid, block, smem, stream, args...);
}

}  // namespace detllm::kernels::cuda
