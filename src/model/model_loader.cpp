// Model loading by path (GGUF or HF directory) and the default-model lookup.
#include "model/model_loader.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/parallel.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace detllm {
namespace fs = std::filesystem;

namespace {

// XXH3 of each weight's stored bits (fp32, or the file's f16/bf16/block bytes, seeded with
// the dtype), hashed in parallel, then XXH3 of those digests in load order: a function of the
// weights alone, whatever the thread count.
uint64_t hash_weights(const ModelWeights& w) {
  struct Part {
    const void* p;
    size_t n_bytes;
    DType dtype;
  };
  std::vector<Part> parts;
  auto vec = [&](const std::vector<float>& v) {
    parts.push_back({v.data(), v.size() * sizeof(float), DType::kF32});
  };
  auto mat = [&](const HostTensor& t) { parts.push_back({t.ptr(), t.n_bytes(), t.dtype}); };
  mat(w.tok_embd);
  for (const auto& l : w.layers) {
    vec(l.attn_norm);
    mat(l.wq.w);
    vec(l.wq.bias);
    mat(l.wk.w);
    vec(l.wk.bias);
    mat(l.wv.w);
    vec(l.wv.bias);
    mat(l.wo.w);
    vec(l.q_norm);
    vec(l.k_norm);
    vec(l.ffn_norm);
    mat(l.w_gate.w);
    mat(l.w_up.w);
    mat(l.w_down.w);
    // Mixture of experts: nothing is added for dense layers, so their digests do not change.
    if (!l.router.w.empty()) mat(l.router.w);
    for (const MlpWeights& e : l.experts) {
      mat(e.w_gate.w);
      mat(e.w_up.w);
      mat(e.w_down.w);
    }
    if (!l.shared_expert_gate.w.empty()) {
      mat(l.shared_expert.w_gate.w);
      mat(l.shared_expert.w_up.w);
      mat(l.shared_expert.w_down.w);
      mat(l.shared_expert_gate.w);
    }
    if (!l.kv_cache_scales.empty()) vec(l.kv_cache_scales);  // the checkpoint's FP8 KV scales
  }
  vec(w.out_norm);
  mat(w.lm_head.w);
  vec(w.rope_freq_factors);
  std::vector<uint64_t> digests(parts.size());
  parallel_each(parts.size(), 32, [&](size_t i) {
    const Part& p = parts[i];
    // fp32 parts keep seed 0, so fp32 checkpoints keep the digests they had before.
    digests[i] = XXH3_64bits_withSeed(p.p, p.n_bytes, static_cast<uint64_t>(p.dtype));
  });
  return XXH3_64bits(digests.data(), digests.size() * sizeof(uint64_t));
}

// Maps the file (refusing a FIFO or device at once instead of blocking on it) to read its magic.
bool is_gguf_file(const fs::path& p) {
  const MappedFile f = MappedFile::open(p.string());
  return f.size() >= 4 && std::string_view(reinterpret_cast<const char*>(f.data()), 4) == "GGUF";
}

}  // namespace

uint64_t hash_model_weights(const ModelWeights& w) { return hash_weights(w); }

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
    const std::string text = read_regular_file(config_path.string());
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
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
