// WeightPrefetcher and the prefetch plan (weight_prefetch.h).
#include "kernels/cuda/weight_prefetch.h"

#include <algorithm>

namespace detllm::kernels::cuda {

PrefetchPlan plan_weight_prefetch(int64_t rows, int64_t pitch, int64_t budget) {
  PrefetchPlan p;
  if (rows <= 0 || pitch < 16 || budget < 16) return p;
  p.rows = rows;
  if (rows * pitch <= budget) {
    p.prefix = pitch;
    return p;
  }
  p.prefix = std::min(pitch, budget / rows) / 16 * 16;
  if (p.prefix == 0) p.rows = 0;
  return p;
}

WeightPrefetcher::~WeightPrefetcher() {
  if (side_) cudaStreamSynchronize(side_);
  if (queued_) cudaEventDestroy(queued_);
  if (done_) cudaEventDestroy(done_);
  if (side_) cudaStreamDestroy(side_);
}

cudaError_t WeightPrefetcher::ensure() {
  if (side_) return cudaSuccess;
  cudaError_t err = cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  return err;
}

cudaError_t WeightPrefetcher::issue(cudaStream_t stream, const void* base, int64_t pitch,
                                    const PrefetchPlan& plan) {
  if (plan.bytes() == 0) return cudaSuccess;
  cudaError_t err = ensure();
  if (err == cudaSuccess) err = cudaEventRecord(queued_, stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(side_, queued_, 0);
  if (err == cudaSuccess) err = launch_prefetch_l2(base, pitch, plan, side_);
  if (err == cudaSuccess) pending_ = true;
  return err;
}

cudaError_t WeightPrefetcher::join(cudaStream_t stream) {
  if (!pending_) return cudaSuccess;
  cudaError_t err = cudaEventRecord(done_, side_);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(stream, done_, 0);
  if (err == cudaSuccess) pending_ = false;
  return err;
}

void WeightPrefetcher::synchronize() {
  if (side_) cudaStreamSynchronize(side_);
}

}  // namespace detllm::kernels::cuda
