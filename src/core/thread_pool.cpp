// ThreadPool: workers spin briefly on a generation counter, then sleep on it (C++20
// atomic wait/notify, a futex on Linux), so back-to-back decode ops do not pay a wake-up each.
// Test: ctest --test-dir build -L kernels -R ThreadPool.
#include "core/thread_pool.h"

#include <algorithm>

#include "core/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace detllm {
namespace {

// Spin iterations before sleeping. Small: the machine may be oversubscribed (tests run 4
// threads on 2 cores), and a sleeping worker costs only a futex wake.
constexpr int kSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(_M_X64)
  _mm_pause();
#endif
}

// The pool whose parallel_for the current thread is running a part of (nested calls run inline).
thread_local const ThreadPool* t_current_pool = nullptr;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  check(n_threads >= 1 && n_threads <= 1024, "thread pool: n_threads must be in 1..1024, got {}",
        n_threads);
  workers_.reserve(n_threads - 1);
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_part(int part) {
  const int64_t begin = part_begin(job_n_items_, job_n_parts_, part);
  const int64_t end = part_begin(job_n_items_, job_n_parts_, part + 1);
  if (begin >= end) return;
  const ThreadPool* saved = t_current_pool;
  t_current_pool = this;
  try {
    job_call_(job_ctx_, begin, end);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  t_current_pool = saved;
}

void ThreadPool::worker_main(int worker_index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    // Every worker acknowledges every job, even one with fewer parts than threads, so the
    // caller never rewrites the job fields while a worker may still read them.
    if (worker_index < job_n_parts_) run_part(worker_index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(int64_t n_items, int64_t min_items_per_part, Trampoline call, void* ctx) {
  if (n_items <= 0) return;
  min_items_per_part = std::max<int64_t>(1, min_items_per_part);
  const int64_t wanted = (n_items + min_items_per_part - 1) / min_items_per_part;
  const int n_parts = static_cast<int>(std::min<int64_t>(n_threads_, wanted));
  if (n_parts == 1 || t_current_pool == this) {  // serial, or nested inside one of our parts
    call(ctx, 0, n_items);
    return;
  }

  std::lock_guard<std::mutex> call_lock(call_mutex_);
  job_call_ = call;
  job_ctx_ = ctx;
  job_n_items_ = n_items;
  job_n_parts_ = n_parts;
  error_ = nullptr;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);  // publishes the job fields
  generation_.notify_all();

  run_part(0);

  int left = pending_.load(std::memory_order_acquire);
  for (int spin = 0; left != 0 && spin < kSpinIterations; ++spin) {
    cpu_relax();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    pending_.wait(left, std::memory_order_acquire);
    left = pending_.load(std::memory_order_acquire);
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace detllm
