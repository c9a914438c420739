// Dequantization of every supported GGML type, checked bit for bit against the gguf Python
// package's reference dequantizer (fixtures from scripts/ref/make_loader_fixtures.py: random
// blocks, expected fp32 in tests/data/loaders/quant_types.expected.f32), plus hand-built blocks.
// Run: ctest --test-dir build -L model  (or build/tests/test_model --gtest_filter='Dequant*')
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/dequant.h"
#include "formats/gguf.h"
#include "formats/loader_test_util.h"

namespace detllm {
namespace {

const std::string& kDataDir = testing::kLoaderDataDir;
using testing::read_bytes;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(Dequant, TypeTableMatchesGgml) {
  struct Expect {
    GgmlType t;
    int64_t block, bytes;
  };
  for (const Expect& e : {Expect{GgmlType::kF32, 1, 4}, Expect{GgmlType::kF16, 1, 2},
                          Expect{GgmlType::kBF16, 1, 2}, Expect{GgmlType::kQ8_0, 32, 34},
                          Expect{GgmlType::kQ4_0, 32, 18}, Expect{GgmlType::kQ4_1, 32, 20},
                          Expect{GgmlType::kQ5_0, 32, 22}, Expect{GgmlType::kQ5_1, 32, 24},
                          Expect{GgmlType::kIQ4_NL, 32, 18}, Expect{GgmlType::kQ2_K, 256, 84},
                          Expect{GgmlType::kQ3_K, 256, 110}, Expect{GgmlType::kQ4_K, 256, 144},
                          Expect{GgmlType::kQ5_K, 256, 176}, Expect{GgmlType::kQ6_K, 256, 210},
                          Expect{GgmlType::kIQ4_XS, 256, 136}}) {
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(e.t));
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->block_size, e.block) << info->name;
    EXPECT_EQ(info->type_size, e.bytes) << info->name;
    EXPECT_TRUE(info->can_dequantize) << info->name;
  }
  EXPECT_EQ(ggml_type_info(4), nullptr);  // retired Q4_2
  EXPECT_EQ(ggml_type_info(31), nullptr);
  EXPECT_EQ(ggml_type_info(1000), nullptr);
  EXPECT_EQ(ggml_type_name(13), "Q5_K");
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_FALSE(ggml_type_info(16)->can_dequantize);
  EXPECT_EQ(ggml_type_name(4), "unknown type 4");
}

TEST(Dequant, UnsupportedTypeThrowsNamingIt) {
  std::vector<uint8_t> block(66, 0);
  std::vector<float> out(256);
  try {
    dequantize_ggml(16, block.data(), out.data(), 256);
    FAIL() << "IQ2_XXS must not dequantize";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dequantize_ggml(2, block.data(), out.data(), 31), Error);  // not a whole block
}

TEST(Dequant, Q4_0HandBuiltBlock) {
  // d = 0.5 (f16 0x3800); qs[j] = j | (15 - j) << 4.
  uint8_t block[18] = {0x00, 0x38};
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_ggml(static_cast<uint32_t>(GgmlType::kQ4_0), block, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
  }
}

TEST(Dequant, Q4_KHandBuiltBlock) {
  // d = 1, dmin = 0.5; sub-block s gets scale s + 1 and min s (high sub-blocks use the packed
  // 6-bit form); every nibble is 3.
  uint8_t block[144] = {};
  block[0] = 0x00;
  block[1] = 0x3c;  // d = 1.0
  block[2] = 0x00;
  block[3] = 0x38;  // dmin = 0.5
  uint8_t* sc = block + 4;
  for (int s = 0; s < 4; ++s) {
    sc[s] = static_cast<uint8_t>(s + 1);
    sc[s + 4] = static_cast<uint8_t>(s);
  }
  for (int s = 4; s < 8; ++s) {  // scale = s + 1 < 16 and min = s < 16: low 4 bits only
    sc[s + 4] = static_cast<uint8_t>((s + 1) | (s << 4));
  }
  std::memset(block + 16, 0x33, 128);
  float y[256];
  dequantize_ggml(static_cast<uint32_t>(GgmlType::kQ4_K), block, y, 256);
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(y[32 * s + l], static_cast<float>(s + 1) * 3.0f - 0.5f * static_cast<float>(s))
          << "sub-block " << s;
    }
  }
}

TEST(Dequant, Q6_KHandBuiltBlock) {
  // All 6-bit values 33 (q = 1): ql nibbles 1, qh pairs 2 (= 0b10 -> +32); scales i - 8; d = 2.
  uint8_t block[210] = {};
  std::memset(block, 0x11, 128);
  std::memset(block + 128, 0xAA, 64);
  for (int i = 0; i < 16; ++i) block[192 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 8));
  block[208] = 0x00;
  block[209] = 0x40;  // d = 2.0
  float y[256];
  dequantize_ggml(static_cast<uint32_t>(GgmlType::kQ6_K), block, y, 256);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(y[i], 2.0f * static_cast<float>(i / 16 - 8)) << i;
}

TEST(Dequant, WidenIsExact) {
  const uint16_t bf[3] = {0x3f80, 0xc0a0, 0x7f80};
  float out[3];
  widen_to_f32(DType::kBF16, reinterpret_cast<const uint8_t*>(bf), out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -5.0f);
  EXPECT_TRUE(std::isinf(out[2]));
  const uint16_t h[2] = {0x3555, 0x0001};
  widen_to_f32(DType::kF16, reinterpret_cast<const uint8_t*>(h), out, 2);
  EXPECT_EQ(out[0], 0.333251953125f);
  EXPECT_EQ(out[1], std::ldexp(1.0f, -24));
}

// quant_types.gguf (one tensor per supported type, random blocks; scripts/ref/
// make_loader_fixtures.py), the gguf package's dequantize() of it (fp32, all tensors one after
// another) and the manifest (name, type, shape, offset, numel of each).
struct QuantTypes {
  std::unique_ptr<GgufFile> file;
  std::vector<float> expected;
  nlohmann::json manifest;
};

QuantTypes load_quant_types() {
  QuantTypes q;
  q.file = GgufFile::open(kDataDir + "quant_types.gguf");
  const std::vector<uint8_t> raw = read_bytes(kDataDir + "quant_types.expected.f32");
  q.expected.resize(raw.size() / 4);
  std::memcpy(q.expected.data(), raw.data(), q.expected.size() * 4);
  std::ifstream mf(kDataDir + "quant_types.expected.json");
  q.manifest = nlohmann::json::parse(mf);
  return q;
}

// Every tensor of quant_types.gguf (one per supported type, random blocks) against the gguf
// package's dequantize(): identical fp32 bits.
TEST(Dequant, BitExactAgainstGgufPackage) {
  const QuantTypes q = load_quant_types();
  const auto& file = q.file;
  const std::vector<float>& expected = q.expected;
  const nlohmann::json& manifest = q.manifest;
  ASSERT_EQ(manifest.size(), 15u);
  std::set<std::string> types_seen;
  for (const auto& m : manifest) {
    const std::string name = m["name"];
    SCOPED_TRACE(name);
    const HostTensor t = file->load_f32(name);
    EXPECT_EQ(t.shape, m["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(ggml_type_name(file->tensor_info(name).type), m["type"].get<std::string>());
    const size_t offset = m["offset"];
    ASSERT_EQ(static_cast<size_t>(t.numel()), m["numel"].get<size_t>());
    ASSERT_LE(offset + t.data.size(), expected.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (bits_of(t.data[i]) != bits_of(expected[offset + i]) && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << t.data[i] << " expected "
                      << expected[offset + i];
      }
    }
    EXPECT_EQ(mismatches, 0u);
    types_seen.insert(m["type"].get<std::string>());
  }
  EXPECT_EQ(types_seen,
            (std::set<std::string>{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                   "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"}));
}

// Tensors kept in their stored type (load_stored, what the model keeps in memory): the file's
// bytes as they are, the mapped DType, and dequantize_tensor of them gives the gguf package's
// fp32 bits, like load_f32.
TEST(Dequant, StoredTensorsKeepTheFileBytesAndDequantizeToThePackageBits) {
  const QuantTypes q = load_quant_types();
  const auto& file = q.file;
  const std::vector<float>& expected = q.expected;
  const nlohmann::json& manifest = q.manifest;
  std::set<DType> dtypes;
  for (const auto& m : manifest) {
    const std::string name = m["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo& info = file->tensor_info(name);
    HostTensor t = file->load_stored(name);
    ASSERT_EQ(t.dtype, ggml_dtype(info.type).value());
    dtypes.insert(t.dtype);
    EXPECT_EQ(t.shape, m["shape"].get<std::vector<int64_t>>());
    if (t.dtype == DType::kF32) {
      EXPECT_TRUE(t.raw.empty());
    } else {
      EXPECT_TRUE(t.data.empty());
      ASSERT_EQ(t.raw.size(), info.n_bytes);
      EXPECT_EQ(std::memcmp(t.raw.data(), file->tensor_data(name), info.n_bytes), 0);
      EXPECT_EQ(static_cast<int64_t>(t.n_bytes()), dtype_row_bytes(t.dtype, t.numel()));
    }
    dequantize_tensor(t);
    ASSERT_EQ(t.dtype, DType::kF32);
    EXPECT_TRUE(t.raw.empty());
    const size_t offset = m["offset"];
    ASSERT_EQ(t.data.size(), m["numel"].get<size_t>());
    ASSERT_EQ(std::memcmp(t.data.data(), expected.data() + offset, t.data.size() * 4), 0);
  }
  EXPECT_EQ(dtypes.size(), 15u);  // f32, f16, bf16 and the twelve block types
}

TEST(Dequant, GgmlTypesMapToDTypes) {
  EXPECT_EQ(ggml_dtype(3), DType::kQ4_1);
  EXPECT_EQ(ggml_dtype(14), DType::kQ6_K);
  EXPECT_EQ(ggml_dtype(6), DType::kQ5_0);
  EXPECT_EQ(ggml_dtype(23), DType::kIQ4_XS);
  EXPECT_FALSE(ggml_dtype(16).has_value());   // IQ2_XXS: not loadable
  EXPECT_FALSE(ggml_dtype(999).has_value());  // not a ggml type
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeInfo* info = ggml_type_info(id);
    const auto dt = ggml_dtype(id);
    EXPECT_EQ(dt.has_value(), info != nullptr && info->can_dequantize) << id;
    if (dt) {  // the layout core/dtype.h keeps in memory is ggml's
      EXPECT_EQ(dtype_block_elems(*dt), info->block_size) << id;
      EXPECT_EQ(dtype_block_bytes(*dt), info->type_size) << id;
    }
  }
}

// A stored tensor whose byte count does not match its shape is refused, not read past.
TEST(Dequant, DequantizeTensorRefusesWrongByteCount) {
  HostTensor t;
  t.shape = {2, 32};
  t.dtype = DType::kQ4_1;
  t.raw.resize(39);  // 2 blocks need 40
  EXPECT_THROW(dequantize_tensor(t), Error);
}

}  // namespace
}  // namespace detllm
