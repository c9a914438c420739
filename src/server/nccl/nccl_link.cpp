// NcclComm: a rank of the trainer's weight-transfer group on a CUDA device (nccl/nccl_link.h).
#include "server/nccl/nccl_link.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"

namespace detllm::server {

namespace {

void cuda_check(cudaError_t e, const char* what) {
  check(e == cudaSuccess, "NCCL weight transfer: {}: {}", what, cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const char* what) {
  check(r == ncclSuccess, "NCCL weight transfer: {}: {}", what, ncclGetErrorString(r));
}

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL_UNIQUE_ID_BYTES changed");

}  // namespace

NcclComm::NcclComm(const NcclUniqueId& id, int32_t rank, int32_t world_size, int32_t device)
    : rank_(rank), world_size_(world_size), device_(device) {
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclComm_t c = nullptr;
  nccl_check(ncclCommInitRank(&c, world_size, uid, rank), "ncclCommInitRank");
  comm_ = c;
  // PyNcclCommunicator's warm-up: all_reduce of torch.zeros(1) (fp32, sum) on every rank.
  float* one = nullptr;
  cuda_check(cudaMalloc(&one, sizeof(float)), "cudaMalloc");
  cuda_check(cudaMemsetAsync(one, 0, sizeof(float), s), "cudaMemset");
  const ncclResult_t r = ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, c, s);
  const cudaError_t e = cudaStreamSynchronize(s);
  cudaFree(one);
  nccl_check(r, "warm-up ncclAllReduce");
  cuda_check(e, "warm-up synchronize");
}

NcclComm::~NcclComm() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (buf_ != nullptr) cudaFree(buf_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void* NcclComm::staging(size_t bytes) {
  if (bytes > buf_bytes_) {
    if (buf_ != nullptr) cuda_check(cudaFree(buf_), "cudaFree");
    buf_ = nullptr;
    buf_bytes_ = 0;
    cuda_check(cudaMalloc(&buf_, bytes), "cudaMalloc (staging buffer)");
    buf_bytes_ = bytes;
  }
  return buf_;
}

void NcclComm::broadcast(void* device_buf, size_t bytes) {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  auto s = static_cast<cudaStream_t>(stream_);
  nccl_check(ncclBroadcast(device_buf, device_buf, bytes, ncclUint8, 0,
                           static_cast<ncclComm_t>(comm_), s),
             "ncclBroadcast");
}

void NcclComm::receive(void* host_dst, size_t bytes) {
  void* d = staging(bytes);
  broadcast(d, bytes);
  auto s = static_cast<cudaStream_t>(stream_);
  if (bytes > 0) cuda_check(cudaMemcpyAsync(host_dst, d, bytes, cudaMemcpyDeviceToHost, s), "copy to host");
  cuda_check(cudaStreamSynchronize(s), "receive synchronize");
}

void NcclComm::send(const void* host_src, size_t bytes) {
  check(rank_ == 0, "NcclComm::send: rank {} is not the root", rank_);
  void* d = staging(bytes);
  auto s = static_cast<cudaStream_t>(stream_);
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  if (bytes > 0) cuda_check(cudaMemcpyAsync(d, host_src, bytes, cudaMemcpyHostToDevice, s), "copy to device");
  broadcast(d, bytes);
  cuda_check(cudaStreamSynchronize(s), "send synchronize");
}

std::string NcclComm::describe() const {
  int v = 0;
  ncclGetVersion(&v);
  return fmt::format("NCCL {}.{}.{}, rank {} of {}, CUDA device {}", v / 10000, (v / 100) % 100,
                     v % 100, rank_, world_size_, device_);
}

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId uid;
  nccl_check(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  NcclUniqueId out{};
  std::memcpy(out.data(), &uid, out.size());
  return out;
}

NcclLinkFactory nccl_link_factory() {
  return [](const NcclJoinInfo& info) -> std::unique_ptr<NcclLink> {
    const NcclUniqueId id = info.unique_id ? *info.unique_id : join_stateless_group(info);
    return std::make_unique<NcclComm>(id, info.rank, info.world_size, info.device);
  };
}

}  // namespace detllm::server
