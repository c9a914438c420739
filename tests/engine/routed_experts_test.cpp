// Routed experts in the engine's output (Request::return_routed_experts): on the tiny
// transformers checkpoints (scripts/ref/hf_checkpoints.py) the ids each token is routed to equal
// what transformers' router logits give (top-k, ties to the lower index; golden.json's
// "routed_experts"), through the scoring rows (prompt logprobs) and the sampling row alike;
// off by default; refused by a model without experts. Bit-identity across batching, chunking
// and the prefix cache: the conformance suite on tiny-qwen3-moe (tests/conformance).
// Run: build/tests/test_engine --gtest_filter='RoutedExperts*'
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "model/synthetic.h"

namespace detllm::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kData = fs::path(DETLLM_SOURCE_DIR) / "tests" / "data" / "loaders" / "hf_v5";

struct Served {
  std::unique_ptr<LoadedModel> loaded;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<Engine> engine;
};

Served serve(const fs::path& dir) {
  Served s;
  s.loaded = load_model(dir.string());
  s.ops = kernels::make_cpu_ops(2);
  s.model = std::make_unique<LlamaModel>(s.loaded->config, s.loaded->weights, *s.ops);
  EngineConfig c;
  c.scheduler.kv.block_size = 4;
  c.kv_cache_tokens = 1024;
  s.engine = std::make_unique<Engine>(*s.model, c);
  return s;
}

// What a request of `prompt` returns: the prompt entries (positions 1…n−1) then the one
// generated token's, i.e. the experts of tokens 0 … n−1 in order.
std::vector<std::vector<int32_t>> routed_of_every_token(Engine& engine,
                                                        const std::vector<int32_t>& prompt) {
  Request r;
  r.prompt = prompt;
  r.max_tokens = 1;
  r.sampling.temperature = 0;
  r.prompt_logprobs = 0;
  r.return_routed_experts = true;
  std::vector<std::vector<int32_t>> out;
  std::vector<int32_t> generated;
  RequestCallbacks cb;
  cb.on_prompt_logprobs = [&](std::span<const PromptLogprob> lps) {
    for (const PromptLogprob& lp : lps) out.push_back(lp.routed_experts);
  };
  cb.on_token = [&](const TokenEvent& e) { generated = e.routed_experts; };
  engine.add_request(r, cb);
  engine.run_until_idle();
  out.push_back(generated);
  return out;
}

TEST(RoutedExperts, EqualTransformersRoutingOnEveryMoeCheckpoint) {
  for (const char* name : {"qwen3_moe", "qwen3_moe_ties", "mixtral", "qwen2_moe", "olmoe"}) {
    SCOPED_TRACE(name);
    Served s = serve(kData / name);
    const ModelConfig& c = s.loaded->config;
    std::ifstream in(kData / name / "golden.json");
    const json golden = json::parse(in);
    int64_t n_compared = 0;
    for (const json& seq : golden["sequences"]) {
      const auto ids = seq["tokens"].get<std::vector<int32_t>>();
      const auto want = seq["routed_experts"].get<std::vector<std::vector<std::vector<int32_t>>>>();
      ASSERT_EQ(want.size(), ids.size());
      const auto got = routed_of_every_token(*s.engine, ids);
      ASSERT_EQ(got.size(), ids.size());
      for (size_t t = 0; t < ids.size(); ++t) {
        ASSERT_EQ(got[t].size(), static_cast<size_t>(c.n_layers * c.moe.n_experts_used));
        ASSERT_EQ(want[t].size(), static_cast<size_t>(c.n_layers));
        for (int32_t l = 0; l < c.n_layers; ++l) {
          const std::vector<int32_t> ours(got[t].begin() + l * c.moe.n_experts_used,
                                          got[t].begin() + (l + 1) * c.moe.n_experts_used);
          EXPECT_EQ(ours, want[t][static_cast<size_t>(l)]) << "token " << t << " layer " << l;
          ++n_compared;
        }
      }
    }
    EXPECT_GT(n_compared, 0);
  }
}

TEST(RoutedExperts, OffByDefault) {
  Served s = serve(kData / "qwen3_moe");
  Request r;
  r.prompt = {1, 2, 3, 4, 5};
  r.max_tokens = 3;
  r.prompt_logprobs = 0;
  int n_tokens = 0;
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) {
    EXPECT_TRUE(e.routed_experts.empty());
    ++n_tokens;
  };
  cb.on_prompt_logprobs = [&](std::span<const PromptLogprob> lps) {
    for (const PromptLogprob& lp : lps) EXPECT_TRUE(lp.routed_experts.empty());
  };
  s.engine->add_request(r, cb);
  s.engine->run_until_idle();
  EXPECT_EQ(n_tokens, 3);
}

// n samples fork after the prompt: the first token of each is predicted by the same prompt row,
// so they report the same experts; later tokens the experts of their own previous token.
TEST(RoutedExperts, SamplesShareThePromptRowsExperts) {
  Served s = serve(kData / "qwen3_moe");
  Request r;
  r.prompt = {7, 8, 9, 10, 11, 12};
  r.max_tokens = 4;
  r.n = 3;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 5;
  r.return_routed_experts = true;
  std::vector<std::vector<std::vector<int32_t>>> routed(3);
  RequestCallbacks cb;
  cb.on_token = [&](const TokenEvent& e) { routed[e.sample_index].push_back(e.routed_experts); };
  s.engine->add_request(r, cb);
  s.engine->run_until_idle();
  const auto want = routed_of_every_token(*s.engine, r.prompt).back();  // the last prompt token
  for (const auto& sample : routed) {
    ASSERT_EQ(sample.size(), 4u);
    EXPECT_EQ(sample[0], want);
  }
}

TEST(RoutedExperts, AModelWithoutExpertsRefusesTheRequest) {
  const ModelConfig config = synthetic_config("tiny-llama");
  const ModelWeights weights = make_synthetic_weights(config, 3);
  auto ops = kernels::make_cpu_ops(1);
  LlamaModel model(config, weights, *ops);
  Engine engine(model, EngineConfig{});
  Request r;
  r.prompt = {1, 2, 3};
  r.return_routed_experts = true;
  try {
    engine.add_request(r, {});
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("return_routed_experts"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace detllm::engine
