// parallel_each (parallel.h).
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace detllm {

void parallel_each(size_t n_jobs, size_t max_threads, const std::function<void(size_t)>& fn) {
  if (n_jobs == 0) return;
  const size_t hw = std::max<size_t>(1, std::thread::hardware_concurrency());
  const size_t n_threads = std::clamp<size_t>(std::min(hw, max_threads), 1, n_jobs);
  std::vector<std::exception_ptr> errors(n_jobs);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n_jobs; i = next++) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n_threads - 1);
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace detllm
