// Checkpoints whose weights and config disagree, and files that are not regular files: every
// tensor in the files is used or refused by name (docs/models.md, "Every tensor is used or
// refused"), so two different files never claim one fingerprint; a FIFO in place of a shard,
// an index or a tokenizer file is refused at once instead of hanging the loader.
// The Hugging Face cases start from a checkpoint transformers wrote (tests/data/loaders/hf_v5);
// the GGUF case from the default model.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "model/bundle.h"
#include "model/model_loader.h"

namespace detllm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kLlama = fs::path(DETLLM_SOURCE_DIR) / "tests/data/loaders/hf_v5/llama31";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// A copy of the transformers checkpoint in a fresh temporary directory.
class Scratch {
 public:
  explicit Scratch(const std::string& name)
      : dir_(fs::temp_directory_path() / ("detllm-damaged-" + name)) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kLlama / f, dir_ / f);
  }
  ~Scratch() { fs::remove_all(dir_); }
  const fs::path& dir() const { return dir_; }

  void edit_config(const std::function<void(json&)>& edit) const {
    json j = json::parse(read_bytes(dir_ / "config.json"));
    edit(j);
    write_bytes(dir_ / "config.json", j.dump(2));
  }

  // Appends a zero-filled bf16 tensor to model.safetensors (header rewritten, data appended).
  void add_tensor(const std::string& name, std::vector<int64_t> shape) const {
    const std::string file = read_bytes(dir_ / "model.safetensors");
    uint64_t header_len = 0;
    std::memcpy(&header_len, file.data(), 8);
    json header = json::parse(file.substr(8, header_len));
    std::string data = file.substr(8 + header_len);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const size_t begin = data.size();
    data.append(static_cast<size_t>(n) * 2, '\0');
    header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t len = text.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &len, 8);
    write_bytes(dir_ / "model.safetensors", out + text + data);
  }

 private:
  fs::path dir_;
};

// load_model's error, or "" when it loaded.
std::string load_error(const fs::path& path) {
  try {
    (void)load_model(path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, needle) \
  EXPECT_NE(std::string(text).find(needle), std::string::npos) << "no '" << (needle) << "' in: " << (text)

TEST(DamagedCheckpoint, TheUndamagedCopyLoads) {
  const Scratch s("clean");
  EXPECT_EQ(load_error(s.dir()), "");
}

TEST(DamagedCheckpoint, ConfigWithFewerLayersThanTheWeightsIsRefused) {
  const Scratch s("fewer-layers");
  s.edit_config([](json& j) { j["num_hidden_layers"] = 1; });
  const std::string e = load_error(s.dir());
  EXPECT_HAS(e, "model.layers.1.");
  EXPECT_HAS(e, "layer 1 is past the 1 layers the config declares in num_hidden_layers");
  EXPECT_HAS(e, "tensors in the files are not used");
}

TEST(DamagedCheckpoint, StrayBiasIsRefusedByName) {
  const Scratch s("stray-bias");
  s.add_tensor("model.layers.0.self_attn.q_proj.bias", {64});
  const std::string e = load_error(s.dir());
  EXPECT_HAS(e, "'model.layers.0.self_attn.q_proj.bias'");
  EXPECT_HAS(e, "the config declares no bias");
}

TEST(DamagedCheckpoint, ExtraLayerIsRefusedByName) {
  const Scratch s("extra-layer");
  s.add_tensor("model.layers.2.mlp.up_proj.weight", {160, 64});
  const std::string e = load_error(s.dir());
  EXPECT_HAS(e, "'model.layers.2.mlp.up_proj.weight'");
  EXPECT_HAS(e, "layer 2 is past the 2 layers");
}

TEST(DamagedCheckpoint, StoredRopeInverseFrequenciesAreAllowed) {
  // transformers recomputes inv_freq from the config and ignores a stored copy; so do we.
  const Scratch s("inv-freq");
  s.add_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", {8});
  EXPECT_EQ(load_error(s.dir()), "");
}

// The GGUF metadata's block_count lowered below the blocks the file holds.
TEST(DamagedCheckpoint, GgufBlockCountBelowTheBlocksIsRefused) {
  const std::string model = find_default_model();
  if (model.empty()) GTEST_SKIP() << "default model not installed: run scripts/setup.sh";
  std::string bytes = read_bytes(model);
  const std::string key = "llama.block_count";
  // GGUF KV: u64 key length | key | u32 type (4 = uint32) | value.
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  uint32_t type = 0, blocks = 0;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  std::memcpy(&blocks, bytes.data() + at + key.size() + 4, 4);
  ASSERT_EQ(type, 4u);
  ASSERT_GT(blocks, 20u);
  const uint32_t fewer = 20;
  std::memcpy(bytes.data() + at + key.size() + 4, &fewer, 4);
  const fs::path path = fs::temp_directory_path() / "detllm-damaged-block-count.gguf";
  write_bytes(path, bytes);
  const std::string e = load_error(path);
  fs::remove(path);
  EXPECT_HAS(e, "'blk.20.");
  EXPECT_HAS(e, "layer 20 is past the 20 layers the config declares in <arch>.block_count");
}

// A FIFO in place of `victim` (a file of the copied checkpoint): refused within a second,
// naming the file.
void expect_fifo_refused(const std::string& victim) {
  const Scratch s("fifo");
  fs::remove(s.dir() / victim);
  ASSERT_EQ(::mkfifo((s.dir() / victim).c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = load_error(s.dir());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_HAS(e, victim);
  EXPECT_HAS(e, "is not a regular file (a FIFO)");
}

TEST(DamagedCheckpoint, FifoShardIsRefusedAtOnce) { expect_fifo_refused("model.safetensors"); }

TEST(DamagedCheckpoint, FifoConfigIsRefusedAtOnce) { expect_fifo_refused("config.json"); }

TEST(DamagedCheckpoint, FifoIndexIsRefusedAtOnce) {
  const Scratch s("fifo-index");
  ASSERT_EQ(::mkfifo((s.dir() / "model.safetensors.index.json").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = load_error(s.dir());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_HAS(e, "model.safetensors.index.json");
  EXPECT_HAS(e, "is not a regular file (a FIFO)");
}

TEST(DamagedCheckpoint, FifoTokenizerIsRefusedAtOnce) {
  const Scratch s("fifo-tokenizer");
  ASSERT_EQ(::mkfifo((s.dir() / "tokenizer.json").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::string e;
  try {
    (void)open_model_header(s.dir().string());
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_HAS(e, "tokenizer.json");
  EXPECT_HAS(e, "is not a regular file (a FIFO)");
}

TEST(DamagedCheckpoint, FifoGgufIsRefusedAtOnce) {
  const fs::path path = fs::temp_directory_path() / "detllm-damaged-fifo.gguf";
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = load_error(path);
  fs::remove(path);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_HAS(e, "is not a regular file (a FIFO)");
}

}  // namespace
}  // namespace detllm
