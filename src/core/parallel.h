// parallel_each: a one-shot fan-out for coarse start-up work (reading tensors, hashing them,
// rounding and staging weights). Each index is one job; threads take the next job in turn.
// Jobs must write disjoint data, so the result does not depend on the thread count or order.
// Steady-state kernels use ThreadPool (thread_pool.h) instead: persistent threads, static parts.
#pragma once

#include <cstddef>
#include <functional>

namespace detllm {

// Runs fn(i) for every i in [0, n_jobs) on min(max_threads, hardware threads, n_jobs) threads,
// the caller being one of them; returns when all are done. If jobs throw, the exception of the
// lowest index is rethrown (the others still ran).
void parallel_each(size_t n_jobs, size_t max_threads, const std::function<void(size_t)>& fn);

}  // namespace detllm
