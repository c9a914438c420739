// load_model's config-only read (LoadParts::kConfigOnly) and open_model_header: the same config
// and tokenizer as a full load, no weights read; bad paths still refused with the path named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/bundle.h"
#include "model/config_test_util.h"
#include "model/model_loader.h"

namespace detllm {
namespace {

TEST(ModelLoader, ConfigOnlyReadsTheSameConfigAndNoWeights) {
  const std::string path = find_default_model();
  if (path.empty()) GTEST_SKIP() << "default model not installed: run scripts/setup.sh";
  const auto full = load_model(path);
  const auto head = load_model(path, {}, LoadParts::kConfigOnly);
  testing::expect_same_config(full->config, head->config);
  EXPECT_EQ(head->name, full->name);
  EXPECT_EQ(head->format, full->format);
  EXPECT_FALSE(full->weights.tok_embd.empty());
  EXPECT_TRUE(head->weights.tok_embd.empty());
  EXPECT_TRUE(head->weights.layers.empty());
  EXPECT_EQ(head->weights_hash, 0u);
  EXPECT_NE(full->weights_hash, 0u);

  const ModelBundle h = open_model_header(path);
  ASSERT_TRUE(h.model && h.tokenizer);
  EXPECT_FALSE(h.ops || h.llama);
  EXPECT_EQ(h.tokenizer->encode("The sky is blue", false),
            open_model_bundle(path, 1).tokenizer->encode("The sky is blue", false));
}

TEST(ModelLoader, ConfigOnlyStillRefusesBadPaths) {
  const auto dir = std::filesystem::temp_directory_path() / "detllm-loader-test";
  std::filesystem::create_directories(dir);
  const auto not_gguf = dir / "x.gguf";
  std::ofstream(not_gguf) << "NOPE this is not a model";
  for (const std::string& p : {(dir / "missing.gguf").string(), not_gguf.string(), dir.string()}) {
    try {
      (void)load_model(p, {}, LoadParts::kConfigOnly);
      ADD_FAILURE() << p << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace detllm
