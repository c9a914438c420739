// Progress indicator on stderr.
#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace detllm::cli {

Progress::Progress(std::string label)
    : label_(std::move(label)), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(size_t done, size_t total) {
  const int percent = total == 0 ? 100 : static_cast<int>(100 * done / total);
  if (percent == last_percent_) return;
  if (tty_) {
    constexpr int kWidth = 30;
    const int filled = percent * kWidth / 100;
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% (%zu/%zu)", label_.c_str(), filled,
                 "##############################", kWidth - filled, "", percent, done, total);
    std::fflush(stderr);
  } else if (percent / 25 != last_percent_ / 25) {
    std::fprintf(stderr, "%s: %d%% (%zu/%zu)\n", label_.c_str(), percent, done, total);
  }
  last_percent_ = percent;
}

void Progress::finish(const std::string& summary) {
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) std::fputc('\n', stderr);
  std::fprintf(stderr, "%s: done in %.2f s%s%s\n", label_.c_str(), s, summary.empty() ? "" : ", ",
               summary.c_str());
}

}  // namespace detllm::cli
