// SelfCheckVerdict (self_check_verdict.h): state names and the refusal message.
#include "determinism/self_check_verdict.h"

#include <fmt/format.h>

namespace detllm {

std::string_view self_check_state_name(SelfCheckState state) {
  switch (state) {
    case SelfCheckState::kNotRun:
      return "not_run";
    case SelfCheckState::kPassed:
      return "passed";
    case SelfCheckState::kFailed:
      return "failed";
    case SelfCheckState::kDisabled:
      return "disabled";
  }
  return "?";
}

std::string SelfCheckVerdict::refusal_message() const {
  return fmt::format(
      "deterministic requests are refused: the startup self-check failed ({}), so this "
      "machine's kernels no longer give the same bits at every batch size, chunking and page "
      "layout. Run `detllm check` for the full report and compare the GPU driver and library "
      "versions with a machine where it passes; non-deterministic requests are still served "
      "(send \"deterministic\": false)",
      failure);
}

}  // namespace detllm
