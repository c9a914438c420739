// Test helpers for the server: a tiny byte-level tokenizer (256 byte tokens + "<|end|>" as
// EOS), and a complete ServerContext over a synthetic tiny model, so handlers run end to end
// in milliseconds without sockets or model files.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/synthetic.h"
#include "server/engine_loop.h"
#include "server/handlers.h"
#include "server/server_context.h"
#include "tokenizer/tokenizer.h"

namespace detllm::server::testing {

// GPT-2's byte -> printable code point table (the byte-level BPE alphabet).
inline std::string byte_char(int b) {
  int cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      const bool p = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
      if (!p) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Token i < 256 is byte i; 256 is "<|end|>" (special, EOS); `extra_special` are special
// tokens 257, 258, ... `chat_template`: its Jinja chat template ("" = none).
inline std::unique_ptr<Tokenizer> byte_tokenizer(
    const std::string& chat_template = "", const std::vector<std::string>& extra_special = {}) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["<|end|>"] = 256;
  nlohmann::json tj = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"added_tokens",
       {{{"id", 256},
         {"content", "<|end|>"},
         {"single_word", false},
         {"lstrip", false},
         {"rstrip", false},
         {"normalized", false},
         {"special", true}}}}};
  for (size_t i = 0; i < extra_special.size(); ++i) {
    const int id = 257 + static_cast<int>(i);
    tj["model"]["vocab"][extra_special[i]] = id;
    tj["added_tokens"].push_back({{"id", id},
                                  {"content", extra_special[i]},
                                  {"single_word", false},
                                  {"lstrip", false},
                                  {"rstrip", false},
                                  {"normalized", false},
                                  {"special", true}});
  }
  nlohmann::json config = {{"eos_token", "<|end|>"}};
  if (!chat_template.empty()) config["chat_template"] = chat_template;
  return Tokenizer::from_json_string(tj.dump(), "byte_tokenizer", config.dump());
}

// A synthetic model served by an EngineLoop, with a ServerContext ready for the handlers.
struct TinyServer {
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<EngineLoop> loop;
  std::unique_ptr<ServerContext> ctx;

  // model: a synthetic config name (model/synthetic.h), e.g. "tiny-qwen3-moe". make_ops: the
  // backend (default: the CPU's, 2 threads); edit: changes the weights before the model is
  // built on them (a device backend places them then).
  explicit TinyServer(engine::EngineConfig ec = default_engine(),
                      const std::string& model_name = "tiny-llama",
                      const std::function<std::unique_ptr<kernels::Ops>()>& make_ops = {},
                      const std::function<void(ModelWeights&)>& edit = {}) {
    config = synthetic_config(model_name);
    weights = make_synthetic_weights(config, 42);
    if (edit) edit(weights);
    ops = make_ops ? make_ops() : kernels::make_cpu_ops(2);
    model = std::make_unique<LlamaModel>(config, weights, *ops);
    tokenizer = byte_tokenizer();
    loop = std::make_unique<EngineLoop>(*model, ec, tokenizer.get());
    ctx = std::make_unique<ServerContext>();
    ctx->options.model_names = {"tiny", "default"};
    ctx->tokenizer = tokenizer.get();
    ctx->loop = loop.get();
    ctx->vocab_size = config.vocab_size;
    ctx->n_experts_used = config.moe.active() ? config.moe.n_experts_used : 0;
    ctx->max_model_len = loop->config().max_model_len;
    ctx->fingerprint_deterministic = "fp_det";
    ctx->fingerprint_other = "fp_other";
    ctx->policy_description = loop->config().policy.describe();
    ctx->backend_description = "cpu";
    // As detllm serve does: the engine's self-check verdict feeds /metrics and /health.
    ctx->self_check_status = std::string(self_check_state_name(loop->config().self_check.state));
  }
  static engine::EngineConfig default_engine() {
    engine::EngineConfig e;
    e.scheduler.kv.block_size = 4;
    e.kv_cache_tokens = 2048;
    e.scheduler.max_tokens_per_step = 256;
    e.scheduler.max_seqs = 32;
    return e;
  }
};

// A reply's whole body: the body itself, or a stream pumped to its end.
inline std::string body_of(HttpReply& r) {
  if (!r.stream) return r.body;
  std::string out;
  for (int i = 0; i < 100000; ++i) {
    const PumpResult p = r.stream->pump(
        [&](std::string_view chunk) {
          out += chunk;
          return true;
        },
        std::chrono::milliseconds(20));
    if (p != PumpResult::kMore) break;
  }
  return out;
}

}  // namespace detllm::server::testing
