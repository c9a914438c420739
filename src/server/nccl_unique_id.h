// The NCCL unique id a trainer publishes for its weight-transfer group, decoded from the two
// forms vLLM's protocol carries (vllm/distributed/device_communicators/pynccl.py,
// weight_transfer/nccl_common.py):
//   - the TCPStore value of "broadcast_from/0/0": pickle.dumps of vLLM's ctypes structure
//     pynccl_wrapper.ncclUniqueId (rank 0's StatelessProcessGroup.broadcast_obj), i.e.
//     _ctypes._unpickle(ncclUniqueId, ({}, <128 bytes>));
//   - init_info.nccl_unique_id_b64: standard (not URL-safe) base64 of the 128 bytes.
// Only that shape is read (a handful of pickle opcodes, no code is run); anything else is an
// error naming what was found.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace detllm::server {

inline constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using NcclUniqueId = std::array<uint8_t, kNcclUniqueIdBytes>;

NcclUniqueId unique_id_from_pickle(std::span<const uint8_t> pickled);
NcclUniqueId unique_id_from_base64(std::string_view b64);

}  // namespace detllm::server
