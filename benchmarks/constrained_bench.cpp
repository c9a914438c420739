// Constrained vs unconstrained offline throughput (docs/perf.md, "Structured output"; not a
// test): the same batch of requests run through the engine with every request constrained by
// a 50-field JSON schema, and without any constraint, interleaved, on the CPU backend. Every
// request generates exactly --output-len tokens in both conditions (the schema's document is
// longer than that; the unconstrained ones ignore eos), so tokens/s compare like for like.
// Also prints the 50-field schema's compile time (cache off) and the vocabulary preprocessing.
//   constrained_bench [--model PATH] [--batch 64] [--output-len 128] [--threads 2] [--rounds 2]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/bundle.h"
#include "structured/compiler.h"
#include "structured/grammar_constraint.h"
#include "tokenizer/tokenizer.h"

using namespace detllm;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 50 required fields, long enough that the document does not end within the output length.
std::string fifty_field_schema() {
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

struct Args {
  std::string model;
  int batch = 64;
  int output_len = 128;
  int threads = 2;
  int rounds = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--output-len") a.output_len = std::stoi(v);
    else if (k == "--threads") a.threads = std::stoi(v);
    else if (k == "--rounds") a.rounds = std::stoi(v);
    else throw std::runtime_error("unknown option " + k);
  }
  return a;
}

struct RunFigures {
  double seconds = 0;
  int64_t tokens = 0;
  int n_length = 0;  // requests that ran to the output length
};

RunFigures run_once(const ModelBundle& b, const Args& a, const std::vector<int32_t>& prompt,
                    std::shared_ptr<const structured::TokenConstraint> constraint) {
  engine::EngineConfig cfg;
  cfg.scheduler.max_seqs = a.batch;
  cfg.kv_cache_tokens = a.batch * (static_cast<int32_t>(prompt.size()) + a.output_len + 16);
  engine::Engine eng(b.engine_model(), cfg, b.tokenizer.get());
  RunFigures f;
  for (int k = 0; k < a.batch; ++k) {
    engine::Request r;
    r.prompt = prompt;
    r.max_tokens = a.output_len;
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

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  ModelBundle b = open_model_bundle(a.model, a.threads);
  std::printf("model %s, batch %d, output %d tokens, %d threads\n", b.model->name.c_str(),
              a.batch, a.output_len, a.threads);

  auto t0 = Clock::now();
  const auto vocab =
      structured::GrammarVocabulary::from_tokenizer(*b.tokenizer, b.model->config.vocab_size);
  structured::GrammarCompiler uncached(vocab, 1, /*cache_bytes=*/0);
  std::printf("vocabulary preprocessing: %.0f ms (%d ids)\n", ms_since(t0),
              b.model->config.vocab_size);
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
      b.tokenizer->encode("Fill in the form as JSON with every field:", true);
  std::vector<double> ratios;
  for (int round = 0; round < a.rounds; ++round) {
    const RunFigures free = run_once(b, a, prompt, nullptr);
    const RunFigures con = run_once(b, a, prompt, constraint);
    const double tf = static_cast<double>(free.tokens) / free.seconds;
    const double tc = static_cast<double>(con.tokens) / con.seconds;
    std::printf("round %d: unconstrained %.1f tok/s (%lld tokens, %d/%d to length), "
                "constrained %.1f tok/s (%lld tokens, %d/%d to length): ratio %.3f\n",
                round, tf, static_cast<long long>(free.tokens), free.n_length, a.batch, tc,
                static_cast<long long>(con.tokens), con.n_length, a.batch, tc / tf);
    ratios.push_back(tc / tf);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("constrained / unconstrained tokens/s: median %.3f (target >= 0.95)\n",
              ratios[ratios.size() / 2]);
  return 0;
}
