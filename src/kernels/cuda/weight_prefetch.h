// Decode GEMMs' weights pulled into the L2 ahead of their GEMM. At small m a GEMM streams its
// weights (the whole cost of a batch-1 step) while the small ops between GEMMs (norms, RoPE and
// KV append, attention, SiLU·mul) leave the DRAM idle; and cuBLASLt's unsplit kernels keep too
// few bytes in flight to reach the copy rate on the narrow layers (docs/cuda.md, "Small-m
// GEMV"). So, after each GEMM, the model names the next GEMM's weights (Ops::prefetch_weights)
// and a side stream issues bulk L2 prefetches (cp.async.bulk.prefetch.L2) of a prefix of every
// weight row — every row, because every CTA of the GEMM walks its own rows from k = 0, and the
// slowest CTA sets the time — beside the ops in between. A prefetch is a hint: it reads, writes
// nothing and changes no value (tests: CudaWeightPrefetch.*).
// The side stream joins the Ops' stream before a graph capture ends (cuda_graph.cpp), so
// captured decode steps carry the prefetches as a branch off their critical path.
// Measured on the H200 (docs/cuda.md, "Between the GEMMs at small batch"): 1–4% slower at
// batch 1–256, so CudaOptions::weight_prefetch is off by default.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace detllm::kernels::cuda {

// What to prefetch of a (rows, pitch bytes) weight matrix within budget bytes: the whole
// matrix when it fits, else the first prefix bytes of every row (a multiple of 16, the bulk
// copy's unit, at least 16 when pitch allows; 0 = nothing: rows of less than 16 bytes or a
// budget of less than 16 bytes a row). CPU-tested (CudaWeightPrefetch.PlanCoversEveryRow).
struct PrefetchPlan {
  int64_t rows = 0;
  int64_t prefix = 0;  // bytes of each row (== pitch: the whole matrix, one contiguous range)
  int64_t bytes() const { return prefix * rows; }
};
PrefetchPlan plan_weight_prefetch(int64_t rows, int64_t pitch, int64_t budget);

// Issues the plan's bulk L2 prefetches on `stream` (base 16-byte aligned, pitch a multiple of
// 16). Returns the launch's error.
cudaError_t launch_prefetch_l2(const void* base, int64_t pitch, const PrefetchPlan& plan,
                               cudaStream_t stream);

// The side stream and its events. issue(): the side stream waits for what `stream` has queued,
// then prefetches; join(): `stream` waits for the prefetches issued so far (needed before a
// stream capture ends; eager steps need not wait, a prefetch has no result).
class WeightPrefetcher {
 public:
  WeightPrefetcher() = default;
  ~WeightPrefetcher();
  WeightPrefetcher(const WeightPrefetcher&) = delete;
  WeightPrefetcher& operator=(const WeightPrefetcher&) = delete;

  cudaError_t issue(cudaStream_t stream, const void* base, int64_t pitch, const PrefetchPlan& plan);
  cudaError_t join(cudaStream_t stream);
  // Waits for the side stream (before weights are freed).
  void synchronize();

 private:
  cudaError_t ensure();
  cudaStream_t side_ = nullptr;
  cudaEvent_t queued_ = nullptr;  // recorded on the Ops' stream before each prefetch
  cudaEvent_t done_ = nullptr;    // recorded on the side stream by join()
  bool pending_ = false;          // prefetches issued since the last join
};

}  // namespace detllm::kernels::cuda
