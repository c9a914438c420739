// vLLM's packed-broadcast cut (packed_chunks.h).
#include "server/packed_chunks.h"

namespace detllm::server {

std::vector<BroadcastChunk> plan_broadcasts(std::span<const uint64_t> tensor_bytes, bool packed,
                                            uint64_t buffer_size_bytes) {
  std::vector<BroadcastChunk> out;
  BroadcastChunk cur;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    if (cur.count == 0) cur.first = i;
    ++cur.count;
    cur.bytes += tensor_bytes[i];
    // The producer breaks once the total exceeds the buffer (strictly), after appending.
    if (!packed || cur.bytes > buffer_size_bytes) {
      out.push_back(cur);
      cur = {};
    }
  }
  if (cur.count > 0) out.push_back(cur);
  return out;
}

}  // namespace detllm::server
