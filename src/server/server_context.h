// ServerContext: what every HTTP handler shares — options and limits, the tokenizer, the
// engine loop, the served model's facts (names, vocabulary, context, fingerprints), the chat
// template, the seed source and the request counters. Built once by `detllm serve`; handlers
// read it from many threads (mutable parts are atomic or locked).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "determinism/fingerprint.h"
#include "determinism/policy.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/server_options.h"
#include "server/tools/reasoning_parser.h"
#include "server/tools/tool_parser.h"
#include "structured/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server {

class ChatPrompt;
class WeightSync;

// Seeds for requests that do not give one: below 2^53, so that every JSON client (including
// JavaScript's doubles) can send the returned seed back unchanged to replay the request.
class SeedSource {
 public:
  SeedSource();
  uint64_t draw();

 private:
  std::mutex mu_;
  std::mt19937_64 rng_;
};

struct ServerContext {
  ServerOptions options;
  const Tokenizer* tokenizer = nullptr;
  EngineLoop* loop = nullptr;
  const ChatPrompt* chat = nullptr;  // nullptr: the model has no chat template
  int32_t vocab_size = 0;
  int32_t max_model_len = 0;  // prompt + output tokens
  // The served model's experts per token (top-k) — 0 for a model without experts, which
  // refuses return_routed_experts with a 400.
  int32_t n_experts_used = 0;
  bool deterministic_by_default = true;
  DeterminismMode mode = DeterminismMode::kInvariant;  // detllm serve --mode (docs/modes.md)
  std::string fingerprint_deterministic;  // system_fingerprint of deterministic requests
  std::string fingerprint_other;          // ... of the others
  // What fingerprint_deterministic hashes, by name (fingerprint_fields): GET /v1/models
  // publishes it so that a router can name the fields in which two replicas differ. After a
  // weight update the served fingerprint (fingerprint()) also hashes the update's version.
  std::vector<std::pair<std::string, std::string>> fingerprint_fields;
  std::string policy_description;         // X-Detllm-Determinism
  std::string backend_description;        // X-Detllm-Backend
  // The startup self-check (self_check_state_name of EngineConfig::self_check): "passed",
  // "failed" (the engine refuses deterministic requests), "not_run", "disabled".
  std::string self_check_status = "not_run";
  int64_t started_at = 0;  // unix seconds
  // The chat output parsers (--tool-call-parser, resolved against the chat template, and
  // --reasoning-parser) and their marker tokens that the vocabulary marks special, which a
  // parsing request's output keeps (as vLLM turns skip_special_tokens off for them).
  ToolParserKind tool_parser = ToolParserKind::kNone;
  ReasoningParserKind reasoning_parser = ReasoningParserKind::kNone;
  std::vector<int32_t> tool_marker_ids;
  std::vector<int32_t> reasoning_marker_ids;  // (set by configure_chat_parsers)
  // The reasoning's end marker `</think>` as token ids, when a reasoning parser is on: a
  // grammar starts after it (start_grammar_after_reasoning, request_builder.h).
  std::vector<int32_t> reasoning_end_ids;
  // `<think>` as its one token id when the reasoning is optional (qwen3: the output reasons only
  // if it opens with it); empty when it reasons from the start (deepseek_r1). A qwen3 vocabulary
  // without a one-token `<think>` gets no gate (both lists empty).
  std::vector<int32_t> reasoning_open_ids;
  SeedSource seeds;
  Metrics metrics;
  std::atomic<bool> draining{false};  // SIGTERM received: new requests get 503
  // Compiles a request's grammar for the served vocabulary (structured/grammar_constraint.h);
  // throws structured::GrammarError. Unset in a build without the grammar engine: constrained
  // requests get a 400 saying so.
  structured::ConstraintCompileFn compile_grammar;

  // vLLM's weight-transfer endpoints (weight_sync.h): null when this server cannot take new
  // weights, and weight_sync_refusal says why (the endpoints answer 400 with it).
  WeightSync* weight_sync = nullptr;
  std::string weight_sync_refusal = "start detllm serve with --weight-transfer";
  int32_t world_size = 1;  // /get_world_size: the processes that take weights (one)

  const std::string& model_name() const { return options.model_names.front(); }
  // The fingerprint of the weights served now (after a weight update: keyed by its version).
  std::string fingerprint(bool deterministic) const {
    if (loop != nullptr) {
      const auto id = loop->identity();
      if (!id->fingerprint(deterministic).empty()) return id->fingerprint(deterministic);
    }
    return deterministic ? fingerprint_deterministic : fingerprint_other;
  }
};

}  // namespace detllm::server
