// A small persistent thread pool with one primitive: parallel_for over a STATIC partition.
// Static on purpose: part p of n_items is always [p*n/P, (p+1)*n/P), so the work a thread does
// is a pure function of (n_items, P); kernels still never split a reduction across parts.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace detllm {

class ThreadPool {
 public:
  // n_threads >= 1 threads run a parallel_for: the caller plus n_threads - 1 workers.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Calls fn(begin, end) once per part over [0, n_items), parts of the static partition
  //   P = min(n_threads, ceil(n_items / min_items_per_part)),  part p = [p*n/P, (p+1)*n/P).
  // Part 0 runs on the calling thread. Returns when every part is done; the first exception
  // thrown by fn is rethrown here. A call made from inside fn (nested) runs serially inline.
  template <typename Fn>
  void parallel_for(int64_t n_items, Fn&& fn, int64_t min_items_per_part = 1) {
    using F = std::remove_reference_t<Fn>;
    run(
        n_items, min_items_per_part,
        [](void* ctx, int64_t begin, int64_t end) { (*static_cast<F*>(ctx))(begin, end); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // The part boundaries parallel_for uses: begin of part p of n_items split into n_parts.
  static int64_t part_begin(int64_t n_items, int n_parts, int part) {
    return n_items * part / n_parts;
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end);

  void run(int64_t n_items, int64_t min_items_per_part, Trampoline call, void* ctx);
  void worker_main(int worker_index);
  void run_part(int part);

  const int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time per pool

  // The job of the current generation; written by the caller before bumping generation_.
  Trampoline job_call_ = nullptr;
  void* job_ctx_ = nullptr;
  int64_t job_n_items_ = 0;
  int job_n_parts_ = 0;

  std::atomic<uint64_t> generation_{0};  // bumped once per parallel_for (and at shutdown)
  std::atomic<int> pending_{0};          // parts still running on workers
  std::atomic<bool> stop_{false};

  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace detllm
