// Shared by the decode warm-up tests on the CPU (tests/conformance/decode_warmup_test.cpp)
// and the GPU (tests/cuda/cuda_decode_warmup_test.cpp): one engine run of a fixed workload on
// a tiny Llama, with or without Engine::warm_up_decode_graphs first, its captured logits and
// graph counters.
#pragma once

#include <cstring>
#include <map>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "model/decode_warmup.h"
#include "model/llama_model.h"
#include "model/synthetic.h"

namespace detllm::testing {

using Logits = std::map<std::pair<int64_t, int32_t>, std::vector<float>>;  // (request, pos)

struct WarmupRun {
  Logits logits;
  DecodeWarmupResult warmup;
  int64_t captures_in_run = 0;
  int64_t replays_in_run = 0;
};

// Six requests (prompts of 1…11 tokens, 9 new tokens each, sampled at temperature 0.8) on a
// tiny Llama; graphs: the engine's cuda_graphs; warm: warm up before the first request.
inline WarmupRun run_engine(kernels::Ops& ops, GraphMode graphs, bool warm) {
  const ModelConfig cfg = synthetic_config("tiny-llama");
  const ModelWeights w = make_synthetic_weights(cfg, 5);
  LlamaModel model(cfg, w, ops);
  engine::EngineConfig ec;
  ec.cuda_graphs = graphs;
  ec.scheduler.kv.block_size = 4;
  ec.scheduler.max_seqs = 8;
  ec.scheduler.max_tokens_per_step = 64;  // every prompt fits one step
  ec.kv_cache_tokens = 512;
  ec.max_model_len = 48;
  ec.policy.self_check = false;
  engine::Engine e(model, ec);
  WarmupRun r;
  if (warm) r.warmup = e.warm_up_decode_graphs();
  const int64_t captures0 = model.step_stats().n_graph_captures;
  const int64_t replays0 = model.step_stats().n_graph_replays;
  for (int i = 0; i < 6; ++i) {
    engine::Request q;
    for (int t = 0; t < 1 + 2 * i; ++t) q.prompt.push_back((7 * t + 3 * i + 1) % cfg.vocab_size);
    q.max_tokens = 9;
    q.ignore_eos = true;
    q.sampling.temperature = 0.8f;
    q.sampling.seed = 100 + i;
    q.capture_logits = true;
    engine::RequestCallbacks cb;
    const int64_t id = i;
    cb.on_logits = [&r, id](int32_t, int32_t pos, std::span<const float> l) {
      r.logits[{id, pos}].assign(l.begin(), l.end());
    };
    e.add_request(std::move(q), std::move(cb));
  }
  e.run_until_idle();
  r.captures_in_run = model.step_stats().n_graph_captures - captures0;
  r.replays_in_run = model.step_stats().n_graph_replays - replays0;
  return r;
}

inline bool same_bits(const Logits& a, const Logits& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    const auto it = b.find(k);
    if (it == b.end() || it->second.size() != v.size() ||
        std::memcmp(it->second.data(), v.data(), v.size() * sizeof(float)) != 0)
      return false;
  }
  return true;
}

}  // namespace detllm::testing
