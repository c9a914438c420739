// LlmSession: the engine as a library, for the Python package (python/detllm, docs/python.md).
// One object owns the model, its backend, tokenizer and a continuous-batching Engine; a batch
// of requests goes through Engine::step() together (the same scheduler and bits as `detllm
// serve`). Weight updates write the host fp32 weights by Hugging Face name (weight_update.h)
// and rebuild the engine, so no KV block of the old weights survives (the prefix cache is
// invalidated); the fingerprint then carries the caller's weight version instead of a hash.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "structured/grammar_spec.h"
#include "kernels/sampling/sampling_params.h"

namespace detllm {
struct ModelConfig;
class Tokenizer;
struct ParameterSlot;
}  // namespace detllm

namespace detllm::api {

struct SessionOptions {
  std::string model;               // GGUF file, HF directory or synthetic:NAME; "" = the default
  std::string backend = "cpu";     // cpu | cuda
  std::string mode = "invariant";  // fast | invariant | bi-naive | padded | verified
  int32_t threads = 0;             // CPU threads; 0 = every core
  int32_t device = 0;              // CUDA device ordinal
  int32_t kv_cache_tokens = 0;     // 0: the engine's default (device: share of free memory)
  int32_t max_tokens_per_step = 0; // 0: the engine's default
  int32_t max_seqs = 0;            // 0: the backend's default (engine::default_max_seqs)
  bool prefix_cache = true;
  bool self_check = true;          // run the startup self-check (design.md Rule 3)
  bool deterministic = true;       // requests are deterministic unless they say otherwise
  // N >= 1: N CPU ranks over the canonical partition (docs/tensor_parallel.md): every N gives
  // the same bits (and fingerprint); 0: the one-device model (other numerics: its own chunks).
  // update_weights rebuilds the ranks from the updated host weights; sleep is refused with it.
  int32_t tensor_parallel = 0;
  // vLLM's names. quantization: "" (the weights as the checkpoint stores them; an FP8 checkpoint
  // says so itself) or "fp8" (per-channel FP8 E4M3 made at load, model/fp8_weights.h).
  // kv_cache_dtype: "auto" (the backend's own), "bf16", "fp32" or "fp8" (E4M3 with fixed scales
  // per layer and KV head; "fp8_e4m3" is the same). Both are numerics: part of the fingerprint.
  std::string quantization;
  std::string kv_cache_dtype = "auto";
  // Speculative decoding (engine::SpeculativeConfig, docs/speculative.md; the Python package
  // maps vLLM's speculative_config dict onto these): "none", "ngram" or "draft_model";
  // speculative_model is the draft model's path (draft_model). The output is the same bits.
  std::string speculative_method = "none";
  int32_t num_speculative_tokens = 0;
  int32_t prompt_lookup_min = 0;
  int32_t prompt_lookup_max = 0;
  std::string speculative_model;
  bool speculative_adaptive = false;
};

// One request of a batch: prompt token ids and what to do with them.
struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;           // includes the seed
  int32_t max_tokens = 16;           // 0: score the prompt only
  int32_t n = 1;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int32_t prompt_logprobs = -1;      // >= 0: score the prompt with this many top logprobs
  // Mixture-of-experts models: each token's routed experts (engine::Request's field).
  bool return_routed_experts = false;
  // vLLM's token rules (engine::Request): bad_words are strings, tokenized by the session.
  int32_t min_tokens = 0;
  std::vector<int32_t> allowed_token_ids;
  std::vector<std::string> bad_words;
  // Structured output (vLLM's StructuredOutputsParams): kind "" (none), "json" (text: a JSON
  // schema), "json_object", "regex", "choice" (choices), "grammar" (EBNF text).
  std::string structured_kind;
  std::string structured_text;
  std::vector<std::string> structured_choices;
  bool speculative = true;  // false: no drafts for this request (engine::Request::speculation)
};

struct SampleOutput {
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;                               // (tokens) the engine's bits
  std::vector<std::vector<detllm::TokenLogprob>> top_logprobs;  // (tokens)
  // (tokens) (n_layers × k) when asked for: the experts of the token before each one
  // (engine::TokenEvent::routed_experts).
  std::vector<std::vector<int32_t>> routed_experts;
  std::string text;  // decoded token_ids (special tokens skipped)
  std::string finish_reason;                                 // length | stop | abort
  engine::Usage usage;
};

struct RequestOutput {
  std::vector<int32_t> prompt_token_ids;
  std::vector<engine::PromptLogprob> prompt_logprobs;  // (prompt - 1) when asked for
  std::vector<SampleOutput> outputs;                   // (n)
  uint64_t seed = 0;
};

// progress(finished requests, total) after every engine step; return false to stop the batch
// (its requests are aborted and generate throws). Called on the calling thread.
using ProgressFn = std::function<bool(int64_t, int64_t)>;

// One named tensor handed in by the caller (DLPack on the Python side): host memory or, on a
// device backend, device memory of the same process.
struct NamedTensor {
  std::string name;             // Hugging Face parameter name, e.g. model.layers.0.mlp.up_proj.weight
  std::vector<int64_t> shape;
  std::string dtype;            // float32 | bfloat16 | float16
  const void* data = nullptr;   // contiguous, row-major
  bool on_device = false;       // data is device memory (the backend's device)
  int32_t device = 0;           // its CUDA device ordinal, when on_device
};

class LlmSession {
 public:
  explicit LlmSession(const SessionOptions& options);
  ~LlmSession();
  LlmSession(const LlmSession&) = delete;
  LlmSession& operator=(const LlmSession&) = delete;

  // Runs every request to completion through one engine (continuous batching). Throws
  // detllm::Error with the engine's message for an invalid request.
  std::vector<RequestOutput> generate(std::vector<GenerateRequest> requests,
                                      const ProgressFn& progress = {});

  // Writes the named tensors into the weights (every name, shape and dtype is checked first:
  // nothing is written when one is wrong; the error lists every offending name), then rebuilds
  // the engine (prefix cache gone) and sets the fingerprint's weight version. On a device
  // backend each tensor is written in place into the placed weights: device to device when it
  // is device memory of the placed dtype (bf16 matrices, fp32 vectors on CUDA), else through
  // the host fp32 copy (widened there, rounded as the load rounds, uploaded).
  void update_weights(std::span<const NamedTensor> tensors, const std::string& version);
  // The Hugging Face name and shape of every parameter this model takes.
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes() const;
  // Copies one parameter's current values, as fp32, into dst (numel floats): the host copy,
  // or the device's (bf16 widened) after a device-to-device update or for a model that
  // exists only in device memory.
  void read_parameter(const std::string& name, float* dst, size_t numel) const;

  // sleep: frees the KV pool (the engine) and, at level 2, the backend's copy of the weights
  // (device backends; the host fp32 weights stay). wake: restores them. generate while
  // asleep throws.
  void sleep(int level);
  void wake();
  bool sleeping() const { return sleep_level_ > 0; }
  // True while the CPU forward reads a GGUF's stored blocks (until the first update_weights;
  // the logits are those of the fp32 weights either way).
  bool forward_reads_blocks() const;

  std::string fingerprint() const;     // of deterministic requests
  std::string weight_version() const;  // "" until update_weights
  std::string model_name() const;
  std::string backend_description() const;
  std::string self_check_summary() const;
  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;  // throws for a model without one (synthetic:NAME)
  bool has_tokenizer() const;
  int32_t max_model_len() const;
  int64_t n_engine_steps_last_call() const { return last_steps_; }

 private:
  struct State;
  void build_engine();
  void read_device_values(const ParameterSlot& slot, float* dst) const;
  // CPU, GGUF blocks: the forward moves from the stored blocks to the host fp32 weights
  // (State::f32) before the first update writes them; a no-op afterwards and elsewhere.
  void forward_on_host_f32();
  void refresh_host_copy();
  // A request's grammar compiled for this model's vocabulary (the compiler made on first use).
  std::shared_ptr<const structured::TokenConstraint> compile_grammar(
      const structured::GrammarSpec& spec);
  std::unique_ptr<State> s_;
  int sleep_level_ = 0;
  int64_t last_steps_ = 0;
};

}  // namespace detllm::api
