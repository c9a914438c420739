// Progress lines on stderr for the GPU benchmarks: "[tool   12.3s] message", seconds since
// the log was made (at program start when it is a namespace-scope constant).
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace detllm::bench_util {

class ProgressLog {
 public:
  explicit ProgressLog(std::string tool) : tool_(std::move(tool)) {}
  template <typename... Args>
  void operator()(fmt::format_string<Args...> f, Args&&... args) const {
    fmt::print(stderr, "[{} {:6.1f}s] {}\n", tool_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(),
               fmt::format(f, std::forward<Args>(args)...));
    std::fflush(stderr);
  }

 private:
  std::string tool_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace detllm::bench_util
