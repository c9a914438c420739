// Stop-string cutting and hold-back for streamed text.
#include "server/stop_filter.h"

#include <algorithm>

namespace detllm::server {

StopFilter::StopFilter(std::vector<std::string> stops, bool include_stop)
    : stops_(std::move(stops)), include_stop_(include_stop) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopFilter::push(std::string_view text) {
  if (stopped_ || finished_) return {};
  pending_.append(text);
  // Earliest complete stop string: cut there.
  size_t cut = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < cut) {
      cut = at;
      which = &s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    matched_ = *which;
    std::string out = pending_.substr(0, include_stop_ ? cut + which->size() : cut);
    pending_.clear();
    return out;
  }
  // Longest suffix of pending_ that is a proper prefix of a stop string: hold it back. A stop
  // string starts at a UTF-8 lead byte, so the released part ends on a character boundary.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopFilter::finish() {
  if (finished_) return {};
  finished_ = true;
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace detllm::server
