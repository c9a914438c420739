// Command-line lists the benchmarks share: "512,2048" → {512, 2048}.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace detllm::bench_util {

// Integers ≥ lo (positive by default), comma-separated; empty on a malformed list (a value below
// lo or not a number).
inline std::vector<int> parse_counts(const std::string& list, long lo = 1) {
  std::vector<int> out;
  size_t at = 0;
  while (at < list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    char* stop = nullptr;
    const long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < lo || v > 1'000'000'000) return {};
    out.push_back(static_cast<int>(v));
    at = end + 1;
  }
  return out;
}

// Names, comma-separated (empty items dropped).
inline std::vector<std::string> parse_names(const std::string& list) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    if (end > at) out.push_back(list.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace detllm::bench_util
