// Test data that does not live in this repository, named in one place: the real tokenizer files
// of Llama-2, Llama-3 and Qwen3 (tokenizer.json + tokenizer_config.json each). Where they come
// from and how to get them: docs/testing.md, "Test data from outside the repository". A test
// that needs a missing file skips and names the file (missing_tokenizer_file below).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>

namespace detllm::test {

// The folder that holds <name>/tokenizer.json: $DETLLM_TOKENIZER_DATA if set, else
// tests/data/external/tokenizers in the source tree (git-ignored: where docs/testing.md puts
// the downloaded files).
inline std::string tokenizer_data_dir() {
  if (const char* env = std::getenv("DETLLM_TOKENIZER_DATA"); env && *env) return env;
  return std::string(DETLLM_SOURCE_DIR) + "/tests/data/external/tokenizers";
}

// <dir>/<name>/<file>, e.g. tokenizer_file("llama3") → …/llama3/tokenizer.json.
inline std::string tokenizer_file(const std::string& name,
                                  const std::string& file = "tokenizer.json") {
  return tokenizer_data_dir() + "/" + name + "/" + file;
}

// The skip message for the first of `names` whose `file` is missing, or nullopt when all are
// present. Use: if (auto m = missing_tokenizer_file({"llama3"})) GTEST_SKIP() << *m;
inline std::optional<std::string> missing_tokenizer_file(
    std::initializer_list<const char*> names, const std::string& file = "tokenizer.json") {
  for (const char* name : names) {
    const std::string path = tokenizer_file(name, file);
    if (!std::filesystem::exists(path))
      return "missing " + path +
             " (test data from outside the repository: see docs/testing.md, or set "
             "DETLLM_TOKENIZER_DATA)";
  }
  return std::nullopt;
}

}  // namespace detllm::test
