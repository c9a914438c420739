// Opens model + tokenizer + CPU backend in one call.
#include "model/bundle.h"

#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"

namespace detllm {

namespace {

// The model and its tokenizer; path "" = the default model.
ModelBundle open_model_and_tokenizer(const std::string& path_in,
                                     const std::function<void(size_t, size_t)>& progress,
                                     LoadParts parts) {
  std::string path = path_in;
  if (path.empty()) {
    path = find_default_model();
    check(!path.empty(),
          "the default model ({}) is not installed: run scripts/setup.sh, or pass --model PATH",
          kDefaultModelFile);
  }
  ModelBundle b;
  b.model = load_model(path, progress, parts);
  if (b.model->format == ModelFormat::kGguf) {
    b.tokenizer = Tokenizer::from_gguf(*GgufFile::open(path));
  } else {
    const auto tok = std::filesystem::path(path) / "tokenizer.json";
    check(std::filesystem::exists(tok), "{}: no tokenizer.json beside the weights", path);
    b.tokenizer = Tokenizer::from_json_file(tok.string());
  }
  return b;
}

}  // namespace

LlamaModel& ModelBundle::engine_model() const {
  if (tp) return tp->leader();
  check(llama != nullptr, "the model bundle has no forward (no backend installed)");
  return *llama;
}

ModelConfig ModelBundle::kv_memory_config() const {
  ModelConfig c = model->config;
  if (tp) c.n_kv_heads = tp->kv_heads_on_device();
  return c;
}

ModelBundle open_model_header(const std::string& path) {
  return open_model_and_tokenizer(path, {}, LoadParts::kConfigOnly);
}

ModelBundle open_model_bundle(const std::string& path, int n_threads,
                              const std::function<void(size_t, size_t)>& progress) {
  ModelBundle b = open_model_and_tokenizer(path, progress, LoadParts::kAll);
  b.ops = kernels::make_cpu_ops(n_threads);
  b.llama = std::make_unique<LlamaModel>(b.model->config, b.model->weights, *b.ops);
  return b;
}

}  // namespace detllm
