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
//   nccl (vLLM's default) is refused by name: this server has no NCCL group.
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

namespace detllm::server {

class WeightSync {
 public:
  // The identity of the weights after an update to `version` (the fingerprints keyed by it).
  using IdentityFn = std::function<WeightIdentity(const std::string& version)>;
  // weights: the host fp32 weights the engine computes on (every parameter present, fp32).
  WeightSync(EngineLoop& loop, const ModelConfig& config, ModelWeights& weights,
             IdentityFn identity_of);

  // The endpoints' bodies (JSON), each answered with a JSON object; ApiError 400 for a bad
  // body or tensor, 409 for a call out of order.
  nlohmann::json init(const nlohmann::json& body);
  nlohmann::json start(const nlohmann::json& body);
  nlohmann::json update(const nlohmann::json& body);
  nlohmann::json finish(const nlohmann::json& body);

 private:
  // check_weights as a 400 listing every offending tensor.
  void check_all(std::span<const WeightSource> sources) const;
  void stage(std::span<const WeightSource> sources);

  EngineLoop& loop_;
  std::vector<ParameterSlot> slots_;
  IdentityFn identity_of_;
  std::mutex mu_;  // one protocol call at a time
  std::string backend_;  // "" until init
  bool started_ = false;
  std::map<size_t, std::vector<float>> staged_;  // slot index -> fp32 values
  int64_t n_updates_ = 0;
};

}  // namespace detllm::server
