// vLLM's StatelessProcessGroup rendezvous for a non-master rank, over torch's TCPStore: the
// unique id of the trainer's NCCL group (nccl_link.h, join_stateless_group).
#include <fmt/format.h>

#include "core/error.h"
#include "server/nccl_link.h"
#include "server/tcp_store_client.h"

namespace detllm::server {

NcclUniqueId join_stateless_group(const NcclJoinInfo& info) {
  check(info.rank > 0 && info.rank < info.world_size, "NCCL group: rank {} of {}: the trainer is "
        "rank 0, this server must be 1 … {}", info.rank, info.world_size, info.world_size - 1);
  TcpStoreClient store(info.master_address, info.master_port, info.timeout);
  // TCPStore(is_master=False, world_size=N): counted in "init/", which rank 0's store waits for.
  store.join_workers();
  // PyNcclCommunicator.__init__ on a StatelessProcessGroup: rank 0 makes the id and
  // broadcast_obj's it; it is that group's first broadcast from rank 0.
  const std::vector<uint8_t> pickled = store.get("broadcast_from/0/0");
  try {
    return unique_id_from_pickle(pickled);
  } catch (const Error& e) {
    throw_error("NCCL group at {}:{}: {}", info.master_address, info.master_port, e.what());
  }
}

}  // namespace detllm::server
