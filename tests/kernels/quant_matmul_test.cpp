// Weights kept in GGUF block types (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS) on the CPU backend, bit for bit: the AVX2 block decoders equal core/quant.h's
// scalar ones on random bytes (every scale bit pattern, NaN and subnormal halves included);
// matmul and embedding on block weights equal the same ops on the dequantized fp32 weights for
// m = 1…130 rows, every row index and 1–4 threads; the reference backend agrees with itself the
// same way; ragged rows are refused.
// Run: build/tests/test_kernels --gtest_filter='Quant*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant.h"
#include "formats/gguf.h"
#include "kernel_test_util.h"
#include "kernels/cpu/quant_decode.h"
#include "kernels/ops.h"

namespace detllm::kernels {
namespace {

using testing::random_floats;

constexpr DType kBlockTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0,  DType::kQ5_0,
                                 DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,
                                 DType::kQ4_K, DType::kQ5_K,  DType::kQ6_K, DType::kIQ4_XS};

uint16_t half_bits(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

// rows × cols of type t: random quant bytes; the f16 scales (and mins) set to modest values
// so the fp32 results stay finite, as in a real model.
std::vector<uint8_t> random_blocks(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  auto put = [&](uint8_t* p) {
    const uint16_t h = half_bits(scale(rng));
    std::memcpy(p, &h, 2);
  };
  const int64_t bb = dtype_block_bytes(t);
  for (size_t off = 0; off < b.size(); off += bb) {
    uint8_t* blk = b.data() + off;
    switch (t) {
      case DType::kQ4_0:
      case DType::kQ8_0:
      case DType::kQ5_0:
      case DType::kIQ4_NL:
      case DType::kIQ4_XS: put(blk); break;
      case DType::kQ4_1:
      case DType::kQ5_1:
      case DType::kQ4_K:
      case DType::kQ5_K: put(blk); put(blk + 2); break;
      case DType::kQ2_K: put(blk + 80); put(blk + 82); break;
      case DType::kQ3_K: put(blk + 108); break;
      case DType::kQ6_K: put(blk + 208); break;
      default: break;
    }
  }
  return b;
}

std::vector<float> dequantized(DType t, const std::vector<uint8_t>& b, int64_t rows,
                               int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  dequantize_row(t, b.data(), w.data(), rows * cols);
  return w;
}

TEST(QuantDecode, SimdEqualsScalarOnRandomBytes) {
  for (DType t : kBlockTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t n = 8 * dtype_block_elems(t);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<uint8_t> b(static_cast<size_t>(dtype_row_bytes(t, n)));
      for (auto& x : b) x = static_cast<uint8_t>(rng());  // scales: any half, NaN included
      std::vector<float> simd(n), scalar(n);
      cpu::decode_row(t, b.data(), simd.data(), n);
      dequantize_row(t, b.data(), scalar.data(), n);
      ASSERT_EQ(std::memcmp(simd.data(), scalar.data(), n * sizeof(float)), 0) << "trial " << trial;
    }
  }
}

// The AVX2 decoders against an independent implementation: the gguf Python package's
// dequantize() of quant_types.gguf (fixtures of tests/formats/dequant_test.cpp).
TEST(QuantDecode, SimdEqualsTheGgufPackage) {
  const std::string dir = std::string(DETLLM_SOURCE_DIR) + "/tests/data/loaders/";
  const auto file = GgufFile::open(dir + "quant_types.gguf");
  std::ifstream ef(dir + "quant_types.expected.f32", std::ios::binary);
  const std::vector<char> raw{std::istreambuf_iterator<char>(ef), std::istreambuf_iterator<char>()};
  std::ifstream mf(dir + "quant_types.expected.json");
  const nlohmann::json manifest = nlohmann::json::parse(mf);
  int n_block_types = 0;
  for (const auto& m : manifest) {
    const HostTensor t = file->load_stored(m["name"]);
    if (!dtype_is_block(t.dtype)) continue;
    ++n_block_types;
    SCOPED_TRACE(std::string(dtype_name(t.dtype)));
    std::vector<float> y(static_cast<size_t>(t.numel()));
    cpu::decode_row(t.dtype, t.raw.data(), y.data(), t.numel());
    const size_t offset = m["offset"];
    ASSERT_LE((offset + y.size()) * 4, raw.size());
    EXPECT_EQ(std::memcmp(y.data(), raw.data() + offset * 4, y.size() * 4), 0);
  }
  EXPECT_EQ(n_block_types, 12);
}

// The register decoder the decode-sized matmul uses (decode_block32_regs) against the scalar
// decoder on random bytes, every scale bit pattern (NaN, inf, subnormal halves) included.
TEST(QuantDecode, RegisterDecoderEqualsScalarOnRandomBytes) {
  std::mt19937 rng(11);
  auto check_type = [&](auto tag) {
    constexpr DType t = decltype(tag)::value;
    SCOPED_TRACE(std::string(dtype_name(t)));
    for (int trial = 0; trial < 4000; ++trial) {
      std::vector<uint8_t> b(static_cast<size_t>(dtype_block_bytes(t)));
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      __m256 w[4];
      cpu::decode_block32_regs<t>(b.data(), w);
      float simd[32], scalar[32];
      for (int g = 0; g < 4; ++g) _mm256_storeu_ps(simd + 8 * g, w[g]);
      dequantize_row(t, b.data(), scalar, 32);
      ASSERT_EQ(std::memcmp(simd, scalar, sizeof(simd)), 0) << "trial " << trial;
    }
  };
  check_type(std::integral_constant<DType, DType::kQ4_0>{});
  check_type(std::integral_constant<DType, DType::kQ4_1>{});
  check_type(std::integral_constant<DType, DType::kQ8_0>{});
}

// quant_decode.h decodes Q4_1's q * d + m with ONE fused multiply-add, relying on q * d being
// exact in fp32 (4-bit q times an f16's 11 significant bits). Checked exhaustively over d:
// every one of the 65536 half bit patterns, every q in 0…15, against 64 mins each (a fixed
// spread over the half range plus ±0, ±inf, NaN), both decoders against the scalar one: the
// same bits wherever the scalar value is a number. Where it is NaN the decoders give NaN too,
// but the payload may differ in one case — d = ±inf, q = 0, m NaN: the scalar's 0 · inf makes
// the default NaN and the add keeps it, the FMA returns m's — a block no model has (its values
// are all NaN). The test counts those cases, so a change in them is seen.
TEST(QuantDecode, Q4_1FusedMultiplyAddIsExactForEveryHalfScale) {
  std::vector<uint16_t> mins;
  for (uint32_t h = 0; h < 0x10000; h += 1031) mins.push_back(static_cast<uint16_t>(h));
  for (uint16_t h : {0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x3C00}) mins.push_back(h);
  mins.resize(64, 0x3800);
  uint8_t b[20];
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>((j << 4) | (15 - j));  // all q
  float scalar[32], got[2][32];
  int64_t mismatches = 0, nan_payloads = 0;
  for (uint32_t d = 0; d < 0x10000; ++d) {
    std::memcpy(b, &d, 2);
    for (size_t i = 0; i < mins.size(); ++i) {
      const uint16_t m = mins[(i + d) % mins.size()];
      std::memcpy(b + 2, &m, 2);
      dequantize_row(DType::kQ4_1, b, scalar, 32);
      cpu::decode_row(DType::kQ4_1, b, got[0], 32);
      __m256 w[4];
      cpu::decode_block32_regs<DType::kQ4_1>(b, w);
      for (int g = 0; g < 4; ++g) _mm256_storeu_ps(got[1] + 8 * g, w[g]);
      for (const float* y : got) {
        for (int j = 0; j < 32; ++j) {
          if (std::memcmp(&scalar[j], &y[j], 4) == 0) continue;
          const bool payload_only = std::isnan(scalar[j]) && std::isnan(y[j]);
          ++(payload_only ? nan_payloads : mismatches);
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // d = ±inf meets a NaN m in 4 of the (d, m) pairs above; q = 0 is 2 of a block's 32
  // elements; 2 decoders.
  EXPECT_EQ(nan_payloads, 4 * 2 * 2);
}

// Q5_1, Q2_K and Q5_K are decoded with one FMA as well (quant_decode.h: the product has at
// most 5 + 11, 2 + 4 + 11 and 5 + 6 + 11 significant bits). Every one of the 65536 half bit
// patterns as d, random quant bytes and sub-block scales, a finite m / dmin: the SIMD decoder
// has the scalar's bits wherever the scalar value is a number, and is NaN where it is NaN.
TEST(QuantDecode, FusedMultiplyAddTypesAreExactForEveryHalfScale) {
  struct Layout {
    DType t;
    int d_at, m_at;
  };
  std::mt19937 rng(5);
  for (const Layout l : {Layout{DType::kQ5_1, 0, 2}, Layout{DType::kQ2_K, 80, 82},
                         Layout{DType::kQ5_K, 0, 2}}) {
    SCOPED_TRACE(std::string(dtype_name(l.t)));
    const int64_t be = dtype_block_elems(l.t);
    std::vector<uint8_t> b(static_cast<size_t>(dtype_block_bytes(l.t)));
    std::vector<float> simd(be), scalar(be);
    int64_t mismatches = 0;
    for (uint32_t d = 0; d < 0x10000; ++d) {
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      std::memcpy(b.data() + l.d_at, &d, 2);
      const uint16_t m = half_bits(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
      std::memcpy(b.data() + l.m_at, &m, 2);
      cpu::decode_row(l.t, b.data(), simd.data(), be);
      dequantize_row(l.t, b.data(), scalar.data(), be);
      for (int64_t j = 0; j < be; ++j) {
        if (std::memcmp(&simd[j], &scalar[j], 4) == 0) continue;
        if (!(std::isnan(simd[j]) && std::isnan(scalar[j]))) ++mismatches;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(QuantDecode, KnownValues) {
  // Q4_1: d = 0.5, m = -1; byte j = (j << 4) | (15 - j): low nibble 15 - j, high j.
  std::vector<uint8_t> b(20);
  const uint16_t d = half_bits(0.5f), m = half_bits(-1.0f);
  std::memcpy(b.data(), &d, 2);
  std::memcpy(b.data() + 2, &m, 2);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>((j << 4) | (15 - j));
  std::vector<float> y(32);
  cpu::decode_row(DType::kQ4_1, b.data(), y.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (15 - j) * 0.5f - 1.0f);
    EXPECT_EQ(y[j + 16], j * 0.5f - 1.0f);
  }
}

// ggml's reference quantizers (core/quant.h) round-trip within half a step (one at Q4_0's
// clamped end) of the block's scale
// (plus the f16 rounding of the scale), and the k-quants are refused, not faked.
TEST(QuantRow, QuantizeRoundTripsWithinHalfAStep) {
  const auto x = random_floats(32 * 16, 21, -2.0f, 3.0f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<uint8_t> b(static_cast<size_t>(dtype_row_bytes(t, 512)));
    quantize_row(t, x.data(), b.data(), 512);
    std::vector<float> y(512);
    dequantize_row(t, b.data(), y.data(), 512);
    for (int blk = 0; blk < 16; ++blk) {
      float lo = x[32 * blk], hi = lo;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[32 * blk + j]);
        hi = std::max(hi, x[32 * blk + j]);
      }
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      const float step = t == DType::kQ8_0 ? amax / 127 : t == DType::kQ4_0 ? amax / 8 : (hi - lo) / 15;
      for (int j = 0; j < 32; ++j) {
        const int i = 32 * blk + j;
        // Q4_0 has 8 steps on one side of zero and 7 on the other: the clamped end is off by
        // up to one step; elsewhere half a step.
        const float steps = t == DType::kQ4_0 ? 1.0f : 0.5f;
        EXPECT_LE(std::fabs(y[i] - x[i]), steps * step * 1.01f + 2e-3f * amax) << i;
      }
    }
  }
  for (DType t : {DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS}) {
    std::vector<uint8_t> b(static_cast<size_t>(dtype_row_bytes(t, 256)));
    EXPECT_THROW(quantize_row(t, x.data(), b.data(), 256), Error) << dtype_name(t);
  }
}

struct QShape {
  int64_t n, k;
};

// The blocks' matmul equals the fp32 matmul on the dequantized weights, bit for bit, for
// batches of m rows, every thread count; a probe row's result does not depend on m or on
// its row index (the fp32 kernel's invariance carries over).
TEST(QuantMatmul, EqualsFp32OnDequantizedWeightsBitForBit) {
  for (DType t : kBlockTypes) {
    const int64_t be = dtype_block_elems(t);
    for (QShape s : {QShape{37, 3 * be}, QShape{25, 2 * 256}, QShape{13, 1536}}) {
      if (s.k % be != 0) continue;
      const auto blocks = random_blocks(t, s.n, s.k, 11 + static_cast<uint32_t>(s.n));
      const auto wf = dequantized(t, blocks, s.n, s.k);
      const WeightMatrix wq{blocks.data(), t, s.n, s.k};
      const WeightMatrix w32{wf.data(), DType::kF32, s.n, s.k};
      const auto bias = random_floats(s.n, 5);
      const auto probe = random_floats(s.k, 99);
      auto solo = make_cpu_ops(1);
      std::vector<float> y_solo(s.n);
      solo->matmul(probe.data(), 1, wq, bias.data(), y_solo.data());
      for (int threads : {1, 2, 3, 4}) {
        auto ops = make_cpu_ops(threads);
        for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 130}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << s.n << " k " << s.k
                                            << " threads " << threads << " m " << m);
          auto x = random_floats(static_cast<size_t>(m * s.k), 1000 + m);
          const int at = m / 2;
          std::copy(probe.begin(), probe.end(), x.begin() + at * s.k);
          std::vector<float> yq(m * s.n), y32(m * s.n);
          ops->matmul(x.data(), m, wq, bias.data(), yq.data());
          ops->matmul(x.data(), m, w32, bias.data(), y32.data());
          EXPECT_BITS_EQ(yq.data(), y32.data(), m * s.n);
          EXPECT_BITS_EQ(yq.data() + at * s.n, y_solo.data(), s.n);
        }
      }
    }
  }
}

// The reference reads blocks through the same scalar decoders: its matmul on blocks is its
// matmul on the dequantized weights, bit for bit, and the CPU backend is within the usual
// fp32 reordering tolerance of it.
TEST(QuantMatmul, ReferenceOnBlocksEqualsReferenceOnDequantized) {
  auto ref = make_ref_ops();
  auto cpu = make_cpu_ops(2);
  for (DType t : kBlockTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t n = 19, k = 2 * dtype_block_elems(t) * (dtype_block_elems(t) == 256 ? 1 : 4);
    const auto blocks = random_blocks(t, n, k, 3);
    const auto wf = dequantized(t, blocks, n, k);
    const int m = 3;
    const auto x = random_floats(m * k, 4);
    std::vector<float> yq(m * n), y32(m * n), yc(m * n);
    ref->matmul(x.data(), m, {blocks.data(), t, n, k}, nullptr, yq.data());
    ref->matmul(x.data(), m, {wf.data(), DType::kF32, n, k}, nullptr, y32.data());
    EXPECT_BITS_EQ(yq.data(), y32.data(), m * n);
    cpu->matmul(x.data(), m, {blocks.data(), t, n, k}, nullptr, yc.data());
    for (int i = 0; i < m * n; ++i) EXPECT_NEAR(yc[i], yq[i], 1e-4f * (1.0f + std::fabs(yq[i])));
  }
}

TEST(QuantEmbedding, RowsAreTheDequantizedRows) {
  auto ref = make_ref_ops();
  for (int threads : {1, 3}) {
    auto cpu = make_cpu_ops(threads);
    for (DType t : kBlockTypes) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      const int64_t vocab = 50, dim = 2 * dtype_block_elems(t);
      const auto blocks = random_blocks(t, vocab, dim, 8);
      const auto wf = dequantized(t, blocks, vocab, dim);
      const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
      const int n = static_cast<int>(ids.size());
      std::vector<float> a(n * dim), b(n * dim);
      cpu->embedding({blocks.data(), t, vocab, dim}, ids.data(), n, a.data());
      ref->embedding({blocks.data(), t, vocab, dim}, ids.data(), n, b.data());
      for (int i = 0; i < n; ++i) EXPECT_BITS_EQ(a.data() + i * dim, wf.data() + ids[i] * dim, dim);
      EXPECT_BITS_EQ(a.data(), b.data(), n * dim);
    }
  }
}

TEST(QuantMatmul, RaggedRowsAreRefused) {
  auto cpu = make_cpu_ops(1);
  auto ref = make_ref_ops();
  std::vector<uint8_t> blocks(4 * 20);
  std::vector<float> x(48), y(2);
  const WeightMatrix w{blocks.data(), DType::kQ4_1, 2, 48};  // 48 is not whole blocks of 32
  EXPECT_THROW(cpu->matmul(x.data(), 1, w, nullptr, y.data()), Error);
  EXPECT_THROW(ref->matmul(x.data(), 1, w, nullptr, y.data()), Error);
}

}  // namespace
}  // namespace detllm::kernels
