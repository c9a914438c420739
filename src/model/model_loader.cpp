// Model loading by path (GGUF or HF directory) and the default-model lookup.
#include "model/model_loader.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace detllm {
namespace fs = std::filesystem;

namespace {

// XXH3 of each weight's fp32 bits, hashed in parallel, then XXH3 of those digests in load
// order: a function of the weights alone, whatever the thread count.
uint64_t hash_weights(const ModelWeights& w) {
  std::vector<const std::vector<float>*> parts = {&w.tok_embd.data};
  for (const auto& l : w.layers) {
    for (const auto* v : {&l.attn_norm, &l.wq.w.data, &l.wq.bias, &l.wk.w.data, &l.wk.bias,
                          &l.wv.w.data, &l.wv.bias, &l.wo.w.data, &l.q_norm, &l.k_norm,
                          &l.ffn_norm, &l.w_gate.w.data, &l.w_up.w.data, &l.w_down.w.data}) {
      parts.push_back(v);
    }
  }
  parts.push_back(&w.out_norm);
  parts.push_back(&w.lm_head.w.data);
  parts.push_back(&w.rope_freq_factors);
  std::vector<uint64_t> digests(parts.size());
  parallel_each(parts.size(), 32, [&](size_t i) {
    digests[i] = XXH3_64bits(parts[i]->data(), parts[i]->size() * sizeof(float));
  });
  return XXH3_64bits(digests.data(), digests.size() * sizeof(uint64_t));
}

bool is_gguf_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string_view(magic, 4) == "GGUF";
}

}  // namespace

std::unique_ptr<LoadedModel> load_model(const std::string& path,
                                        const std::function<void(size_t, size_t)>& progress,
                                        LoadParts parts) {
  const bool weights = parts == LoadParts::kAll;
  std::error_code ec;
  check(fs::exists(path, ec), "model path '{}' does not exist", path);
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  m->name = fs::path(path).filename().string();
  if (m->name.empty()) m->name = fs::path(path).parent_path().filename().string();
  if (fs::is_directory(path, ec)) {
    m->format = ModelFormat::kHuggingFace;
    const fs::path config_path = fs::path(path) / "config.json";
    check(fs::exists(config_path, ec), "{}: no config.json (a Hugging Face model directory needs "
          "config.json and *.safetensors)", path);
    check(fs::is_regular_file(config_path, ec), "{}: config.json is not a regular file",
          config_path.string());
    std::ifstream in(config_path);
    check(in.good(), "{}: cannot read config.json", config_path.string());
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    check(!j.is_discarded(), "{}: config.json is not valid JSON", config_path.string());
    m->config = ModelConfig::from_hf_config(j, config_path.string());
    if (weights) {
      auto source = SafetensorsDir::open(path);
      m->weights = load_weights(*source, WeightNaming::kHuggingFace, m->config, progress);
    }
  } else {
    check(is_gguf_file(path), "{}: not a GGUF file (bad magic) and not a model directory", path);
    m->format = ModelFormat::kGguf;
    auto gguf = GgufFile::open(path);
    m->config = ModelConfig::from_gguf(*gguf);
    if (weights) m->weights = load_weights(*gguf, WeightNaming::kGguf, m->config, progress);
  }
  if (weights) m->weights_hash = hash_weights(m->weights);
  return m;
}

std::string find_default_model() {
  if (const char* env = std::getenv("DETLLM_DEFAULT_MODEL"); env && *env) return env;
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      candidates.push_back(dir / "models" / kDefaultModelFile);
    }
  }
  candidates.push_back(fs::current_path(ec) / "models" / kDefaultModelFile);
  for (const auto& c : candidates) {
    if (fs::exists(c, ec)) return c.string();
  }
  return "";
}

}  // namespace detllm
