// libFuzzer target for the model-config readers: arbitrary bytes as a config.json
// (ModelConfig::from_hf_config) and as a GGUF file's metadata (ModelConfig::from_gguf). Any
// outcome but a config or detllm::Error (a crash, a sanitizer report, another exception type,
// an accepted config that fails validation) is a bug.
// Build and run: scripts/fuzz.sh 60 model_config_fuzz
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "formats/gguf.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using detllm::Error;
  using detllm::ModelConfig;
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) {
    try {
      const ModelConfig c = ModelConfig::from_hf_config(j, "fuzz/config.json");
      c.validate("fuzz/config.json");  // what was accepted must be consistent
      (void)c.rope_table();
    } catch (const Error&) {
    }
  }
  try {
    const auto file = detllm::GgufFile::parse(data, size, "fuzz.gguf");
    const ModelConfig c = ModelConfig::from_gguf(*file);
    c.validate("fuzz.gguf");
  } catch (const Error&) {
  }
  return 0;
}
