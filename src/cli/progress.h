// A progress indicator on stderr for long work (model load, benchmarks): a redrawn bar on a
// terminal, a few milestone lines otherwise (logs stay readable).
#pragma once

#include <chrono>
#include <string>

namespace detllm::cli {

class Progress {
 public:
  explicit Progress(std::string label);
  void update(size_t done, size_t total);
  void finish(const std::string& summary = "");

 private:
  std::string label_;
  bool tty_;
  int last_percent_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace detllm::cli
