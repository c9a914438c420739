// Sequence helpers (names for logs and errors). The Sequence itself is plain data owned by the
// Scheduler; see sequence.h.
#include "engine/sequence.h"

namespace detllm::engine {

std::string_view seq_status_name(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting:
      return "waiting";
    case SeqStatus::kRunning:
      return "running";
  }
  return "?";
}

}  // namespace detllm::engine
