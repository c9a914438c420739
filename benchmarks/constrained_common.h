// What the constrained-throughput benchmarks share (constrained_bench.cpp on the CPU,
// cuda_constrained_bench.cpp on the GPU; docs/perf.md, "Structured output"): the 50-field
// JSON schema, one timed engine run of a batch with or without it, and the comparison of the
// two, interleaved over rounds, printed with their ratio.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/llama_model.h"
#include "structured/compiler.h"
#include "structured/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

namespace detllm::bench_constrained {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 50 required fields, long enough that the document does not end within the output length.
inline std::string fifty_field_schema() {
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  std::vector<std::string> required;
  for (int k = 0; k < 50; ++k) {
    const std::string name = "field_" + std::to_string(k);
    nlohmann::ordered_json p;
    switch (k % 5) {
      case 0: p = {{"type", "string"}, {"maxLength", 24}}; break;
      case 1: p = {{"type", "integer"}, {"minimum", 0}}; break;
      case 2: p = {{"type", "boolean"}}; break;
      case 3: p = {{"enum", {"alpha", "beta", "gamma", "delta"}}}; break;
      default: p = {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 4}};
    }
    props[name] = p;
    required.push_back(name);
  }
  nlohmann::ordered_json s = {{"type", "object"},
                              {"properties", props},
                              {"required", required},
                              {"additionalProperties", false}};
  return s.dump();
}

struct RunFigures {
  double seconds = 0;
  int64_t tokens = 0;
  int n_length = 0;  // requests that ran to the output length
};

// One engine run of `batch` requests of `output_len` tokens at temperature 0.8 (seed = index),
// every one under `constraint` (or none: then eos is ignored, so all run to the length).
inline RunFigures run_once(const LlamaModel& model, const Tokenizer& tokenizer, int batch,
                           int output_len, const std::vector<int32_t>& prompt,
                           std::shared_ptr<const structured::TokenConstraint> constraint) {
  engine::EngineConfig cfg;
  cfg.scheduler.max_seqs = batch;
  cfg.kv_cache_tokens = batch * (static_cast<int32_t>(prompt.size()) + output_len + 16);
  engine::Engine eng(model, cfg, &tokenizer);
  RunFigures f;
  for (int k = 0; k < batch; ++k) {
    engine::Request r;
    r.prompt = prompt;
    r.max_tokens = output_len;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = static_cast<uint64_t>(k);
    r.ignore_eos = !constraint;
    r.constraint = constraint;
    engine::RequestCallbacks cb;
    cb.on_token = [&f](const engine::TokenEvent&) { ++f.tokens; };
    cb.on_finish = [&f](int32_t, engine::FinishReason reason, const engine::Usage&) {
      f.n_length += reason == engine::FinishReason::kLength;
    };
    eng.add_request(std::move(r), std::move(cb));
  }
  const auto t0 = Clock::now();
  eng.run_until_idle();
  f.seconds = ms_since(t0) / 1e3;
  return f;
}

// The schema's compile time (cache off) and the vocabulary preparation, then `rounds` rounds of
// an unconstrained and a constrained run: each round's tokens/s and their ratio, and the median.
inline void compare(const LlamaModel& model, const Tokenizer& tokenizer, int vocab_size,
                    int batch, int output_len, int rounds) {
  auto t0 = Clock::now();
  const auto vocab = structured::GrammarVocabulary::from_tokenizer(tokenizer, vocab_size);
  structured::GrammarCompiler uncached(vocab, 1, /*cache_bytes=*/0);
  std::printf("vocabulary preprocessing: %.0f ms (%d ids)\n", ms_since(t0), vocab_size);
  const structured::GrammarSpec spec = structured::GrammarSpec::json_schema(fifty_field_schema());
  std::vector<double> compile_ms;
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    (void)uncached.compile(spec);
    compile_ms.push_back(ms_since(t0));
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  std::printf("50-field schema compile: median %.1f ms (min %.1f, max %.1f, 5 runs)\n",
              compile_ms[2], compile_ms[0], compile_ms[4]);
  const auto constraint = structured::make_constraint(uncached.compile(spec));

  const std::vector<int32_t> prompt =
      tokenizer.encode("Fill in the form as JSON with every field:", true);
  std::vector<double> ratios;
  for (int round = 0; round < rounds; ++round) {
    const RunFigures free = run_once(model, tokenizer, batch, output_len, prompt, nullptr);
    const RunFigures con = run_once(model, tokenizer, batch, output_len, prompt, constraint);
    const double tf = static_cast<double>(free.tokens) / free.seconds;
    const double tc = static_cast<double>(con.tokens) / con.seconds;
    std::printf("round %d: unconstrained %.1f tok/s (%lld tokens, %d/%d to length), "
                "constrained %.1f tok/s (%lld tokens, %d/%d to length): ratio %.3f\n",
                round, tf, static_cast<long long>(free.tokens), free.n_length, batch, tc,
                static_cast<long long>(con.tokens), con.n_length, batch, tc / tf);
    std::fflush(stdout);
    ratios.push_back(tc / tf);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("constrained / unconstrained tokens/s: median %.3f (target >= 0.95)\n",
              ratios[ratios.size() / 2]);
}

}  // namespace detllm::bench_constrained
