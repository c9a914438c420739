// Shared by the checkpoint tests (hf_checkpoint_test, fp8_checkpoint_test): a checkpoint
// folder loaded onto the CPU backend, its logits at every position, and the reference files
// (JSON, raw fp32) that the scripts in scripts/ref/ wrote beside it.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm::checkpoint_testing {

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return nlohmann::json::parse(in);
}

inline std::vector<float> read_f32(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << p;
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

struct Loaded {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<LlamaModel> llama;
};

// The checkpoint at `dir` on the CPU backend with 2 threads (an FP8 KV cache: kv_fp8).
inline Loaded load(const std::filesystem::path& dir, bool kv_fp8 = false) {
  Loaded l;
  l.model = load_model(dir.string());
  l.ops = kernels::make_cpu_ops(2, CpuActivations::kF32, kv_fp8);
  l.llama = std::make_unique<LlamaModel>(l.model->config, l.model->weights, *l.ops);
  return l;
}

// The logits at every position of `ids` (ids.size() rows of the vocabulary).
inline std::vector<float> all_logits(const Loaded& l, const std::vector<int32_t>& ids) {
  SoloRunner runner(*l.llama, static_cast<int32_t>(ids.size()) + 1);
  return runner.feed(ids, /*all_logits=*/true);
}

}  // namespace detllm::checkpoint_testing
