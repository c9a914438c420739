// EngineConfig resolution and validation.
#include "engine/engine_config.h"

#include <algorithm>

#include "core/error.h"
#include "determinism/modes.h"
#include "model/config.h"

namespace detllm::engine {

void VerifyConfig::validate() const {
  check(window >= 1, "verify.window must be >= 1 (got {})", window);
  check(group_tokens >= window + 1,
        "verify.group_tokens {} must hold at least one window (window + 1 = {} rows)", group_tokens,
        window + 1);
  check(group_min_requests >= 1 && group_max_requests >= group_min_requests,
        "verify: need 1 <= group_min_requests ({}) <= group_max_requests ({})", group_min_requests,
        group_max_requests);
  check(max_wait_steps >= 0, "verify.max_wait_steps must be >= 0 (got {})", max_wait_steps);
}

std::string_view speculative_method_name(SpeculativeMethod m) {
  switch (m) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraftModel:
      return "draft_model";
    case SpeculativeMethod::kNone:
      break;
  }
  return "none";
}

SpeculativeMethod parse_speculative_method(std::string_view name) {
  if (name == "none") return SpeculativeMethod::kNone;
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft_model") return SpeculativeMethod::kDraftModel;
  throw_error("unknown speculative method '{}' (expected none, ngram or draft_model)", name);
}

SpeculativeConfig SpeculativeConfig::with_defaults() const {
  constexpr int32_t kLookupDefault = 5;  // vLLM's, when neither bound is given
  SpeculativeConfig c = *this;
  if (c.prompt_lookup_min == 0 && c.prompt_lookup_max == 0) {
    c.prompt_lookup_min = c.prompt_lookup_max = kLookupDefault;
  } else if (c.prompt_lookup_min == 0) {
    c.prompt_lookup_min = c.prompt_lookup_max;
  } else if (c.prompt_lookup_max == 0) {
    c.prompt_lookup_max = c.prompt_lookup_min;
  }
  return c;
}

void SpeculativeConfig::validate() const {
  if (!enabled()) return;
  check(num_speculative_tokens >= 1, "num_speculative_tokens must be >= 1 (got {})",
        num_speculative_tokens);
  check(prompt_lookup_min >= 1 && prompt_lookup_max >= prompt_lookup_min,
        "need 1 <= prompt_lookup_min ({}) <= prompt_lookup_max ({})", prompt_lookup_min,
        prompt_lookup_max);
}

EngineConfig EngineConfig::resolved(const ModelConfig& model) const {
  EngineConfig c = *this;
  check(c.kv_cache_tokens > 0 || c.scheduler.kv.n_blocks > 0,
        "kv_cache_tokens must be positive (got {})", c.kv_cache_tokens);
  check(c.gpu_memory_fraction > 0 && c.gpu_memory_fraction <= 1,
        "gpu_memory_fraction must be in (0, 1] (got {})", c.gpu_memory_fraction);
  check(c.scheduler.kv.block_size > 0, "block_size must be positive (got {})",
        c.scheduler.kv.block_size);
  if (c.scheduler.kv.n_blocks == 0) {
    c.scheduler.kv.n_blocks =
        (c.kv_cache_tokens + c.scheduler.kv.block_size - 1) / c.scheduler.kv.block_size;
  }
  if (c.max_model_len == 0) c.max_model_len = model.max_position;
  check(c.max_model_len > 0 && c.max_model_len <= model.max_position,
        "max_model_len {} must be in 1…{} (the model's context)", c.max_model_len,
        model.max_position);
  c.scheduler.validate();
  check(c.decode_fixed_rows == 0 || c.decode_fixed_rows >= c.scheduler.max_seqs,
        "decode_fixed_rows {} must be 0 (buckets) or >= max_seqs {} (every decode step fits)",
        c.decode_fixed_rows, c.scheduler.max_seqs);
  check(c.decode_fixed_rows <= decode_row_buckets().back(),
        "decode_fixed_rows {} is above the largest padded shape ({} rows): lower max_seqs",
        c.decode_fixed_rows, decode_row_buckets().back());
  c.policy.validate();
  c.verify.validate();
  c.speculative = c.speculative.with_defaults();
  c.speculative.validate();
  // Speculation runs in every mode: verified takes the drafts as its deterministic requests'
  // candidates (verified on the invariant numerics in the step that computes them); padded
  // verifies a window as decode rows of its fixed-shape decode step (docs/speculative.md).
  if (!c.policy.self_check) c.self_check = SelfCheckVerdict::disabled();
  return c;
}

int32_t default_max_seqs(bool device_backend) {
  return device_backend ? kDeviceDefaultMaxSeqs : SchedulerConfig{}.max_seqs;
}

}  // namespace detllm::engine

namespace detllm {

void apply_mode(DeterminismMode mode, engine::EngineConfig& config) {
  const ModeInfo& info = mode_info(mode);
  config.policy = policy_for_mode(mode, config.policy);
  config.policy.validate();
  // isolate_prefill and prefix_cache_off apply per request (the engine marks deterministic
  // requests of such a mode SequenceOptions::isolated); the others run unconstrained.
  if (info.fixed_decode_shape) {
    config.decode_fixed_rows = config.scheduler.max_seqs;
    config.cuda_graphs = GraphMode::kOn;
  } else {
    config.decode_fixed_rows = 0;
  }
}

}  // namespace detllm
