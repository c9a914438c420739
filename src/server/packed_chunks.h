// How vLLM's NCCL weight transfer cuts a list of tensors into broadcasts
// (weight_transfer/packed_tensor.py): packed, tensors are appended, as raw bytes, to a uint8
// buffer until its size exceeds buffer_size_bytes (the tensor that crosses it is the chunk's
// last), and each chunk is one broadcast; unpacked, every tensor is its own broadcast. The
// trainer (packed_nccl_broadcast_producer) and the receiver (…_consumer) cut alike, so the
// receiver must cut exactly so: a different cut hangs the group or mixes tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace detllm::server {

struct BroadcastChunk {
  size_t first = 0;   // tensors [first, first + count) in the update's order
  size_t count = 0;
  uint64_t bytes = 0;  // their bytes together, back to back
};

// packed: vLLM's cut at buffer_size_bytes; else one chunk per tensor.
std::vector<BroadcastChunk> plan_broadcasts(std::span<const uint64_t> tensor_bytes, bool packed,
                                            uint64_t buffer_size_bytes);

}  // namespace detllm::server
