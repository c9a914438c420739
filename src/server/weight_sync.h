// WeightSync: vLLM's weight-transfer protocol on `detllm serve` (vLLM RFC #31848, PR #31943):
// a trainer pushes new weights into the running server between rollouts.
//
//   POST /init_weight_transfer_engine {"init_info": {"backend": "path" | "shm"}}
//   POST /start_weight_update          {"is_checkpoint_format": true}        (body optional)
//   POST /update_weights               {"update_info": {...}}   (any number of times: chunks)
//   POST /finish_weight_update         {"weight_version": "step-7"}           (body optional)
//
// update_weights only stages: every tensor is checked (a known Hugging Face name, its shape,
// float32/bfloat16/float16) and widened to fp32 into a staging buffer; nothing the engine
// reads changes. finish_weight_update writes the staged values into the host fp32 weights
// the CPU backend computes on, on the engine thread while it holds no request
// (EngineLoop::run_exclusive: admissions wait, requests in flight finish first), then builds
// a new engine (no KV block of the old weights survives) whose requests carry the new
// identity: fingerprint keyed by the version (as api::LlmSession::update_weights) and the
// version itself. So every request runs on exactly one version, and a request replayed with
// its seed gives what a server started on the new weights gives, bit for bit.
//
// Backends of update_info:
//   path: {"path": DIR or .safetensors file, "names": [...] (optional: all its tensors)}
//   shm:  {"names": [...], "dtype_names": [...], "shapes": [[...]], "shm_names": [...]} — one
//         POSIX shared-memory object (shm_open name) per tensor, written by a process on the
//         same machine, row-major; read once and not kept.
//   nccl: vLLM's NCCL weight transfer (TRL's VLLMClient.init_communicator/update_named_params).
//         init_info {"master_address", "master_port", "rank_offset", "world_size", "packed",
//         "packed_buffer_size_bytes", "packed_num_buffers"} (or "nccl_unique_id_b64" instead of
//         the address: no TCPStore); it names no "backend" (vLLM configures that at startup), so
//         an init_info carrying these fields is the nccl backend. The server joins the
//         trainer's group as rank `rank_offset` (nccl_link.h). update_info {"names",
//         "dtype_names", "shapes"} (all empty: the previous call's), then the trainer
//         broadcasts the tensors, packed or one by one (packed_chunks.h), which the server
//         receives while the call runs. Refused updates still receive (and drop) the bytes, so
//         the group stays in step. Needs a build with DETLLM_NCCL (a null factory refuses it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "model/weight_update.h"
#include "server/engine_loop.h"
#include "server/nccl_link.h"

namespace detllm::server {

class WeightSync {
 public:
  // The identity of the weights after an update to `version` (the fingerprints keyed by it).
  using IdentityFn = std::function<WeightIdentity(const std::string& version)>;
  // After the staged values are written into the host weights (engine thread, no request in
  // the engine): a device backend uploads those slots into its placed copy. Empty on the CPU.
  using PlaceFn = std::function<void(std::span<const ParameterSlot> written)>;
  // weights: the host fp32 weights (every parameter present, fp32): the CPU backend computes
  // on them in place; a device backend places them (place). nccl: joins a trainer's NCCL group
  // (null: this build has no NCCL, and the nccl backend is refused by name); nccl_device: the
  // CUDA device its communicator uses.
  WeightSync(EngineLoop& loop, const ModelConfig& config, ModelWeights& weights,
             IdentityFn identity_of, NcclLinkFactory nccl = {}, int32_t nccl_device = 0,
             PlaceFn place = {});
  ~WeightSync();

  // The backends /init_weight_transfer_engine takes ("path", "shm", and "nccl" with a factory).
  std::vector<std::string> backends() const;

  // The endpoints' bodies (JSON), each answered with a JSON object; ApiError 400 for a bad
  // body or tensor, 409 for a call out of order.
  nlohmann::json init(const nlohmann::json& body);
  nlohmann::json start(const nlohmann::json& body);
  nlohmann::json update(const nlohmann::json& body);
  nlohmann::json finish(const nlohmann::json& body);

 private:
  // check_weights as a 400 listing every offending tensor.
  void check_all(std::span<const WeightSource> sources) const;
  // Checks and widens `sources` into `into` (slot index -> fp32); a tensor already staged in
  // this update (staged_ or into) is refused.
  void stage(std::span<const WeightSource> sources, std::map<size_t, std::vector<float>>& into);
  void stage(std::span<const WeightSource> sources) { stage(sources, staged_); }
  nlohmann::json init_nccl(const nlohmann::json& info);
  nlohmann::json update_nccl(const nlohmann::json& info);

  EngineLoop& loop_;
  std::vector<ParameterSlot> slots_;
  IdentityFn identity_of_;
  std::mutex mu_;  // one protocol call at a time
  std::string backend_;  // "" until init
  bool started_ = false;
  std::map<size_t, std::vector<float>> staged_;  // slot index -> fp32 values
  int64_t n_updates_ = 0;
  // nccl
  NcclLinkFactory nccl_factory_;
  int32_t nccl_device_ = 0;
  std::unique_ptr<NcclLink> link_;  // null until init (and after a broken transfer)
  bool packed_ = false;
  uint64_t packed_buffer_bytes_ = 0;
  struct TensorMeta {
    std::string name, dtype;
    std::vector<int64_t> shape;
  };
  std::vector<TensorMeta> last_meta_;  // reused by an update_info with empty lists
  PlaceFn place_;
};

}  // namespace detllm::server
