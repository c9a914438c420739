// KV storage in the backend's KV dtype and the pool sized from device memory
// (KvStorage::tokens_for_memory, EngineConfig::gpu_memory_fraction), plus the --kv-dtype names.
// The CUDA side (bf16 pools, the tensor-core attention) is tests/cuda/cuda_attention_tc_test.cpp.
#include <gtest/gtest.h>

#include <memory>

#include "conformance/delegating_ops.h"
#include "core/error.h"
#include "determinism/policy.h"
#include "kernels/ops.h"
#include "model/kv_storage.h"
#include "model/synthetic.h"

namespace detllm {
namespace {

TEST(KvStorage, CpuPoolsAreFp32AndCopyBlocksByBytes) {
  auto ops = kernels::make_cpu_ops(1);
  const ModelConfig c = synthetic_config("tiny-llama");
  KvStorage kv(*ops, c, 4, 3);
  EXPECT_EQ(kv.dtype(), DType::kF32);
  const kernels::KvCacheLayer l = kv.layer(0);
  EXPECT_EQ(l.dtype, DType::kF32);
  const int64_t block = int64_t{3} * c.n_kv_heads * c.head_dim;
  for (int64_t i = 0; i < block; ++i) l.k_f32()[block + i] = static_cast<float>(i) + 0.5f;
  kv.copy_block(1, 2);
  for (int64_t i = 0; i < block; ++i)
    ASSERT_EQ(l.k_f32()[2 * block + i], static_cast<float>(i) + 0.5f);
}

// A host backend whose KV pools are FP8 codes, as CUDA's --kv-dtype fp8 (the kernels index a
// pool as one byte an element).
class Fp8KvOps final : public conformance::DelegatingOps {
 public:
  DType kv_dtype() const override { return DType::kF8E4M3; }
};

TEST(KvStorage, Fp8PoolsHoldOneByteAnElementAndCopyBlocksByBytes) {
  Fp8KvOps ops;
  const ModelConfig c = synthetic_config("tiny-llama");
  const int32_t n_blocks = 4, block_size = 3;
  KvStorage kv(ops, c, n_blocks, block_size);
  EXPECT_EQ(KvStorage::element_bytes(kv.dtype()), 1u);
  const kernels::KvCacheLayer l = kv.layer(0);
  const int64_t block = int64_t{block_size} * c.n_kv_heads * c.head_dim;
  auto* k = static_cast<uint8_t*>(l.k);
  // Every byte of the pool is the layer's: the last block's last code is writable and reads back.
  for (int64_t i = 0; i < n_blocks * block; ++i) k[i] = static_cast<uint8_t>(i % 251);
  for (int64_t i = 0; i < block; ++i) k[block + i] = static_cast<uint8_t>(200 - i % 100);
  kv.copy_block(1, 2);
  for (int64_t i = 0; i < block; ++i) {
    ASSERT_EQ(k[2 * block + i], static_cast<uint8_t>(200 - i % 100)) << i;
    // The blocks around the copy keep their codes.
    ASSERT_EQ(k[3 * block + i], static_cast<uint8_t>((3 * block + i) % 251)) << i;
    ASSERT_EQ(k[i], static_cast<uint8_t>(i % 251)) << i;
  }
}

TEST(KvStorage, Fp32AccessToABf16LayerIsRefused) {
  kernels::KvCacheLayer l;
  l.dtype = DType::kBF16;
  EXPECT_THROW(l.k_f32(), Error);
  EXPECT_THROW(l.v_f32(), Error);
}

TEST(KvStorage, TokensForMemoryAreWholeBlocksOfTheFraction) {
  const ModelConfig c = synthetic_config("tiny-llama");
  const size_t per_token_bf16 = KvStorage::bytes_per_token(c, DType::kBF16);
  EXPECT_EQ(per_token_bf16, size_t{2} * c.n_layers * c.n_kv_heads * c.head_dim * 2);
  EXPECT_EQ(KvStorage::bytes_per_token(c, DType::kF32), 2 * per_token_bf16);
  EXPECT_EQ(2 * KvStorage::bytes_per_token(c, DType::kF8E4M3), per_token_bf16);
  // 1000 tokens' worth of memory at fraction 0.5: 500 tokens, rounded down to blocks of 16.
  const size_t free = 1000 * per_token_bf16;
  EXPECT_EQ(KvStorage::tokens_for_memory(c, DType::kBF16, free, 0.5, 16), 496);
  EXPECT_EQ(KvStorage::tokens_for_memory(c, DType::kF32, free, 0.5, 16), 240);
  EXPECT_EQ(KvStorage::tokens_for_memory(c, DType::kF8E4M3, free, 0.5, 16), 992);
  EXPECT_EQ(KvStorage::tokens_for_memory(c, DType::kBF16, free, 1.0, 1), 1000);
  // Not one block: refused with what to do.
  try {
    KvStorage::tokens_for_memory(c, DType::kBF16, 10 * per_token_bf16, 0.9, 16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu-memory-fraction"), std::string::npos) << e.what();
  }
  EXPECT_THROW(KvStorage::tokens_for_memory(c, DType::kBF16, free, 0.0, 16), Error);
}

TEST(KvDType, NamesRoundTripAndUnknownIsRefused) {
  for (KvDType d : {KvDType::kAuto, KvDType::kBF16, KvDType::kF32})
    EXPECT_EQ(parse_kv_dtype(kv_dtype_name(d)), d);
  EXPECT_THROW(parse_kv_dtype("fp16"), Error);
}

}  // namespace
}  // namespace detllm
