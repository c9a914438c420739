// The NCCL implementation of NcclLink (server/nccl_link.h): ncclCommInitRank on a CUDA device,
// vLLM's warm-up all-reduce, and receives through a device staging buffer copied to the host.
// Compiled only with DETLLM_NCCL (CMake: detllm_nccl, linked where DETLLM_HAVE_NCCL is defined).
#pragma once

#include "server/nccl_link.h"

namespace detllm::server {

// The factory `detllm serve` gives WeightSync: rendezvous (join_stateless_group, or the given
// unique id), then the communicator. Each link owns its communicator and staging buffer.
NcclLinkFactory nccl_link_factory();

// One rank's communicator. Rank 0 (a test's trainer) sends with send(); the server receives.
class NcclComm : public NcclLink {
 public:
  // ncclCommInitRank on `device`, then the one-element fp32 sum all-reduce vLLM runs first.
  NcclComm(const NcclUniqueId& id, int32_t rank, int32_t world_size, int32_t device);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  void receive(void* host_dst, size_t bytes) override;
  // Broadcasts `bytes` bytes from host memory as the root (rank 0 only).
  void send(const void* host_src, size_t bytes);
  std::string describe() const override;

 private:
  // Grows the device staging buffer to `bytes`; returns it.
  void* staging(size_t bytes);
  void broadcast(void* device_buf, size_t bytes);

  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  void* buf_ = nullptr;     // device staging buffer
  size_t buf_bytes_ = 0;
  int32_t rank_ = 0, world_size_ = 0, device_ = 0;
};

// ncclGetUniqueId, for a test that plays the trainer.
NcclUniqueId make_nccl_unique_id();

}  // namespace detllm::server
