// NcclLink: this server's end of a trainer's NCCL weight-transfer group (vLLM's NCCL weight
// transfer engine, which TRL's VLLMClient.init_communicator/update_named_params drive). The
// trainer is rank 0 and the only sender; the server joins as the rank vLLM's protocol gives it
// (rank_offset) and receives each broadcast.
//
// Joining takes two steps, as vLLM's worker side does (weight_transfer/nccl_common.py):
//   1. the unique id: either from the trainer's TCPStore (join_stateless_group: vLLM's
//      StatelessProcessGroup.create as a non-master rank, then PyNcclCommunicator's
//      broadcast_obj of the id from rank 0), or given as nccl_unique_id_b64;
//   2. ncclCommInitRank(world_size, id, rank) on a CUDA device, then the one-element fp32 sum
//      all-reduce every vLLM communicator runs first (the trainer runs it too: skipping it
//      would deadlock the group).
// Step 1 is host code (tested against torch's real TCPStore); step 2 and the receives are in
// server/nccl/ (compiled with DETLLM_NCCL; the factory is null in a build without NCCL).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/nccl_unique_id.h"

namespace detllm::server {

struct NcclJoinInfo {
  std::string master_address;  // the trainer's TCPStore (unused with unique_id)
  uint16_t master_port = 0;
  int32_t rank = 1;             // this server's rank in the group (vLLM: rank_offset)
  int32_t world_size = 2;       // trainer + servers
  std::optional<NcclUniqueId> unique_id;  // nccl_unique_id_b64, decoded: no TCPStore
  int32_t device = 0;           // the CUDA device the communicator lives on
  std::chrono::milliseconds timeout{300000};  // vLLM's store_timeout (300 s)
};

// vLLM's StatelessProcessGroup.create(host, port, rank, world_size) for rank > 0, then the
// unique id rank 0's PyNcclCommunicator published: the TCPStore value of
// "broadcast_from/0/0" (pickled ncclUniqueId). Throws detllm::Error naming what failed.
NcclUniqueId join_stateless_group(const NcclJoinInfo& info);

class NcclLink {
 public:
  virtual ~NcclLink() = default;
  // Receives rank 0's next broadcast: `bytes` bytes (ncclUint8), copied to host memory at dst
  // when it returns. Throws detllm::Error on an NCCL or CUDA error (the group is then unusable).
  virtual void receive(void* host_dst, size_t bytes) = 0;
  // "NCCL 2.28.3, rank 1 of 2, CUDA device 0", for the init answer and the log.
  virtual std::string describe() const = 0;
};

// Joins the group (both steps above) and returns the link; throws detllm::Error.
using NcclLinkFactory = std::function<std::unique_ptr<NcclLink>(const NcclJoinInfo&)>;

}  // namespace detllm::server
