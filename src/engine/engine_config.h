// EngineConfig: every engine setting in one validated struct — scheduling and KV cache
// (SchedulerConfig), context limit, the determinism policy, and the startup self-check's
// verdict (which gates deterministic requests). Built once, passed by const&.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "determinism/policy.h"
#include "determinism/self_check_verdict.h"
#include "engine/scheduler.h"
#include "model/step_padding.h"

namespace detllm {
struct ModelConfig;
}

namespace detllm::engine {

// The `verified` mode (LLM-42, determinism/modes.h, docs/modes.md): deterministic requests
// decode on the fast numerics; every `window` candidate tokens are verified on the invariant
// numerics, several requests' windows together in one step.
struct VerifyConfig {
  int32_t window = 16;  // candidate tokens per verification window (>= 1)
  // A group (one verification step) holds up to group_tokens recomputed rows (window + 1 per
  // request) and up to group_max_requests windows; it starts once group_min_requests windows
  // are ready, once group_tokens rows are ready, once a ready window has waited
  // max_wait_steps steps, or when no other deterministic sequence is producing candidates.
  int32_t group_tokens = 256;
  int32_t group_min_requests = 4;
  int32_t group_max_requests = 16;
  int32_t max_wait_steps = 8;

  // Sets group_max_requests, lowering group_min_requests to it when above (a user who asks
  // for smaller groups gets them).
  void set_group_max_requests(int32_t n) {
    group_max_requests = n;
    if (group_min_requests > n) group_min_requests = n;
  }
  void validate() const;  // throws detllm::Error
};

// Speculative decoding that changes no bit (docs/speculative.md): before a decode step a
// drafter proposes up to num_speculative_tokens tokens; the step computes the last token and
// the drafts together on the request's own numerics, and a draft is kept only where it equals
// the token plain decoding draws there. vLLM's names. Drafters: `ngram` (prompt lookup,
// engine/ngram_drafter.h) and `draft_model` (a smaller model with the same vocabulary, run
// greedily on its own KV cache, engine/draft_model_drafter.h; the Engine takes the model).
// Modes: fast, invariant and bi-naive; `verified` and `padded` refuse it (resolved()).
enum class SpeculativeMethod : uint8_t { kNone, kNgram, kDraftModel };
// "none", "ngram", "draft_model"
std::string_view speculative_method_name(SpeculativeMethod m);
SpeculativeMethod parse_speculative_method(std::string_view name);  // throws detllm::Error

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int32_t num_speculative_tokens = 5;  // K: drafts per step at most (>= 1)
  // n-gram: the shortest suffix that may match and the longest compared (1 <= min <= max).
  // 0 = unset, filled as vLLM fills them: both unset → 5 and 5; one unset → the other's value.
  int32_t prompt_lookup_min = 0;
  int32_t prompt_lookup_max = 0;
  // draft_model: where the draft model is (a GGUF file or a Hugging Face folder), for whoever
  // loads it (detllm generate|serve --speculative-model); the engine itself takes the loaded
  // model (Engine's draft_model argument) and does not read this.
  std::string model;
  // The adaptive draft length and off-switch per sample (engine/draft_policy.h): host policy
  // over the schedule only, never over bits. Off: every window has K drafts (as the drafter
  // finds them). detllm generate|serve turn it on (--no-speculative-adaptive turns it off).
  bool adaptive = false;
  bool enabled() const { return method != SpeculativeMethod::kNone; }
  // The unset lookup bounds filled (above); validate() then checks the result.
  SpeculativeConfig with_defaults() const;
  void validate() const;  // throws detllm::Error
};

struct EngineConfig {
  SchedulerConfig scheduler;       // kv.n_blocks == 0: derived from kv_cache_tokens
  int32_t kv_cache_tokens = 8192;  // KV pool capacity in tokens when kv.n_blocks == 0
  // Device backends (`detllm serve --backend cuda`): when no KV size is given, the pool takes
  // this share of the device memory still free after weights and GEMM plans
  // (size_kv_pool_from_memory, model/kv_storage.h), as vLLM's --gpu-memory-fraction. In (0, 1].
  // An execution setting: the pool size changes no bit.
  double gpu_memory_fraction = 0.9;
  int32_t max_model_len = 0;       // longest prompt + output; 0 = the model's context
  DeterminismPolicy policy;
  // Decode steps padded to batch-size buckets and replayed as CUDA graphs (auto: where the
  // backend has graphs). An execution setting, not a numerics one: it changes no bit (V8).
  GraphMode cuda_graphs = GraphMode::kAuto;
  // > 0: every decode step padded to exactly this many rows (one fixed shape: the `padded`
  // mode, determinism/modes.h) instead of the buckets; must be >= scheduler.max_seqs.
  int32_t decode_fixed_rows = 0;
  DecodePadding decode_padding() const { return {cuda_graphs, decode_fixed_rows}; }
  // Where tokens are sampled. false (default): on the backend — one Ops::sample_rows call per
  // step over the logits in backend memory, only results come back; logits are downloaded
  // just for the rows someone reads (prompt logprobs, Request::capture_logits). true: every
  // logit row of every step is downloaded and sampled on the host with detllm::sample() (the
  // reference the tests compare against). An execution setting: it changes no bit.
  bool host_sampling = false;
  // The startup self-check's outcome (design.md Rule 3), set by whoever ran run_self_check on
  // the model's ops before building the engine (detllm serve / generate). kFailed: add_request
  // refuses deterministic requests. kNotRun (library use, tests) gates nothing; resolved()
  // makes it kDisabled when policy.self_check is off.
  SelfCheckVerdict self_check;
  // Verification windows and groups; used only when policy.mode is `verified`.
  VerifyConfig verify;
  // Speculative decoding (off by default); a request may opt out (Request::speculation).
  SpeculativeConfig speculative;

  // Fills derived fields (n_blocks, max_model_len) for `model` and validates everything.
  // Throws detllm::Error naming the bad setting.
  EngineConfig resolved(const ModelConfig& model) const;
};

// max_seqs when the user gives none: SchedulerConfig's 256 on host backends, 512 on device
// backends (a backend whose Ops::device_memory_free() > 0). On the H200, 4096 ShareGPT
// requests ran 18,204 output tok/s invariant at 512 against 15,880 at 256, with decode steps
// of up to 512 rows replayed from graphs (docs/perf.md); vLLM's own default on such cards is
// higher still. An execution setting: the batch changes no bit of a deterministic request.
inline constexpr int32_t kDeviceDefaultMaxSeqs = 512;
int32_t default_max_seqs(bool device_backend);

}  // namespace detllm::engine

namespace detllm {

// Applies `mode` to an engine configuration: the policy (policy_for_mode of its current one)
// and the execution constraints — padded: decode steps with deterministic rows padded to
// exactly scheduler.max_seqs rows (decode_fixed_rows) with cuda_graphs = on; the engine
// isolates its deterministic requests (ModeInfo::isolate_prefill). Other settings are kept.
// verified needs no constraint here (the engine runs it: EngineConfig::verify).
void apply_mode(DeterminismMode mode, engine::EngineConfig& config);

}  // namespace detllm
