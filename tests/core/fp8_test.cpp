// core/fp8.h against PyTorch's float8_e4m3fn conversion (tests/data/fp8/e4m3_golden.json, made
// by scripts/ref/fp8_golden.py): the value of every code, and the code of every value, every
// tie between neighbouring values and one float32 ulp either side of it, saturation past 448,
// infinities, NaNs of both signs, float32 subnormals and a random sample.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/fp8.h"

namespace detllm {
namespace {

nlohmann::json golden() {
  std::ifstream in(std::string(DETLLM_SOURCE_DIR) + "/tests/data/fp8/e4m3_golden.json");
  EXPECT_TRUE(in.good()) << "tests/data/fp8/e4m3_golden.json is missing";
  return nlohmann::json::parse(in);
}

float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(Fp8E4m3, EveryCodeDecodesAsTorch) {
  const nlohmann::json g = golden();
  ASSERT_EQ(g["decode"].size(), 256u);
  for (int code = 0; code < 256; ++code) {
    const float got = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    const nlohmann::json& want = g["decode"][code];
    if (want.is_null()) {
      EXPECT_TRUE(std::isnan(got)) << "code " << code;
      EXPECT_EQ(std::signbit(got), code >= 0x80) << "code " << code;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(want.get<float>())) << "code " << code;
    }
  }
}

TEST(Fp8E4m3, EncodesAsTorch) {
  const nlohmann::json g = golden();
  ASSERT_GT(g["encode"].size(), 1000u);
  int ties = 0;
  for (const auto& pair : g["encode"]) {
    const uint32_t b = pair[0].get<uint32_t>();
    const int want = pair[1].get<int>();
    const float x = float_of_bits(b);
    ASSERT_EQ(float_to_fp8_e4m3(x), want) << "float bits 0x" << std::hex << b << " (" << x << ")";
    // A value exactly between two codes (the round-half-to-even cases).
    const uint8_t lo = float_to_fp8_e4m3(x);
    if (std::isfinite(x) && std::fabs(x) < kFp8E4m3Max && (lo & 0x7f) < 0x7e) {
      const float a = fp8_e4m3_to_float(lo);
      const float n =
          fp8_e4m3_to_float(static_cast<uint8_t>(lo + (std::fabs(x) > std::fabs(a) ? 1 : -1)));
      if ((a + n) / 2 == x) ++ties;
    }
  }
  EXPECT_GT(ties, 200) << "the golden set must hold the ties";
}

TEST(Fp8E4m3, RoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    const float v = fp8_e4m3_to_float(static_cast<uint8_t>(code));
    EXPECT_EQ(float_to_fp8_e4m3(v), code == 0x80 ? 0x80 : code) << "code " << code;
  }
}

}  // namespace
}  // namespace detllm
