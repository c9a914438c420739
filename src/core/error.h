// Errors: every failure a user can cause (bad file, bad argument, bad request) is thrown as a
// detllm::Error whose message says what went wrong and what to do. Never a crash, never a
// silent fallback.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace detllm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// throw_error("bad value {} in {}", v, path) — formats with fmt and throws detllm::Error.
template <typename... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// check(cond, "...") — throws detllm::Error when cond is false. For validating outside input
// and API arguments; internal invariants use assert.
template <typename... Args>
void check(bool condition, fmt::format_string<Args...> format, Args&&... args) {
  if (!condition) throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace detllm
