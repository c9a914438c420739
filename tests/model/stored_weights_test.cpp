// The default model (SmolLM2-135M, Q4_1 layers, Q8_0 embeddings) is held in memory as the GGUF
// stores it, and that changes no bit: its logits on the CPU backend (1 and 2 threads, whole
// prompt and token by token) equal those of the same model loaded in fp32
// (WeightStorage::kF32). Run: build/tests/test_model --gtest_filter='StoredWeights*'.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "formats/gguf.h"
#include "kernels/ops.h"
#include "model/llama_model.h"
#include "model/llama_weights.h"
#include "model/model_loader.h"
#include "model/solo_runner.h"

namespace detllm {
namespace {

struct Loaded {
  ModelConfig config;
  ModelWeights weights;
};

Loaded load(const std::string& path, WeightStorage storage) {
  const auto gguf = GgufFile::open(path);
  Loaded l;
  l.config = ModelConfig::from_gguf(*gguf);
  l.weights = load_weights(*gguf, WeightNaming::kGguf, l.config, {}, storage);
  return l;
}

TEST(StoredWeights, DefaultModelKeepsItsBlocksAndGivesTheFp32Bits) {
  const std::string path = find_default_model();
  if (path.empty()) GTEST_SKIP() << "default model not installed: run scripts/setup.sh";
  const Loaded stored = load(path, WeightStorage::kStored);
  const Loaded f32 = load(path, WeightStorage::kF32);
  EXPECT_EQ(stored.weights.tok_embd.dtype, DType::kQ8_0);
  EXPECT_EQ(stored.weights.layers[0].wq.w.dtype, DType::kQ4_1);
  EXPECT_EQ(stored.weights.layers[29].w_down.w.dtype, DType::kQ4_1);
  EXPECT_TRUE(stored.weights.layers[0].wq.w.data.empty());
  EXPECT_EQ(f32.weights.layers[0].wq.w.dtype, DType::kF32);
  // Held bytes: about the file's size, not 5.5 times it.
  size_t bytes = stored.weights.tok_embd.n_bytes();
  for (const auto& l : stored.weights.layers)
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      bytes += m->w.n_bytes();
  EXPECT_LT(bytes, size_t{100} << 20);

  // The un-permuted q rows (GGUF llama files interleave them) decode to the fp32 load's rows.
  HostTensor q = stored.weights.layers[3].wq.w;
  dequantize_tensor(q);
  ASSERT_EQ(q.data.size(), f32.weights.layers[3].wq.w.data.size());
  EXPECT_EQ(std::memcmp(q.data.data(), f32.weights.layers[3].wq.w.data.data(), q.data.size() * 4),
            0);

  const std::vector<int32_t> prompt = {1, 504, 3493, 314, 4413, 28, 339, 2365, 5646, 17, 42};
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    auto ops = kernels::make_cpu_ops(threads);
    const LlamaModel m_stored(stored.config, stored.weights, *ops);
    const LlamaModel m_f32(f32.config, f32.weights, *ops);
    SoloRunner a(m_stored, 64), b(m_f32, 64);
    const auto la = a.feed(prompt, /*all_logits=*/true);
    const auto lb = b.feed(prompt, /*all_logits=*/true);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
    // Decode-sized steps (the in-register block path) too.
    SoloRunner c(m_stored, 64);
    for (size_t i = 0; i < prompt.size(); ++i) {
      const auto lc = c.feed(std::span<const int32_t>(&prompt[i], 1));
      const size_t vocab = lc.size();
      EXPECT_EQ(std::memcmp(lc.data(), lb.data() + i * vocab, vocab * 4), 0) << "token " << i;
    }
  }
}

}  // namespace
}  // namespace detllm
