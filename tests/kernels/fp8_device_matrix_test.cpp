// The device form of an FP8 matrix (kernels/fp8_device_matrix.h): split then joined gives the
// host rows byte for byte (codes and scales where the CUDA GEMMs read them: codes at r · cols,
// scales after the 16-byte-rounded codes, then the activation rule), with dynamic, static and
// bounded activations; what the device form cannot hold — 128-block scales, rows of one matrix
// with different activation rules, columns not a multiple of 16, a bad scale — is refused by
// name, never dropped. Run: build/tests/test_kernels --gtest_filter='Fp8DeviceMatrix*'.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/fp8.h"
#include "kernels/fp8_device_matrix.h"
#include "kernels/ref/fp8_linear.h"

namespace detllm::kernels {
namespace {

std::vector<uint8_t> random_rows(int64_t rows, int64_t cols, uint32_t seed,
                                 float input_scale = 0.0f, float bound = 0.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int64_t rb = dtype_row_bytes(DType::kF8E4M3, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
  std::vector<float> w(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : w) v = u(rng) * static_cast<float>(r + 1);
    ref::fp8_quantize_weight_row(w.data(), cols, out.data() + r * rb);
    std::memcpy(out.data() + r * rb, &input_scale, 4);
    std::memcpy(out.data() + r * rb + 4, &bound, 4);
  }
  return out;
}

std::string refusal(DType t, const std::vector<uint8_t>& rows, int64_t n, int64_t cols) {
  std::vector<uint8_t> out(fp8_device_bytes(n, cols));
  try {
    fp8_device_split(t, rows.data(), n, cols, out.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8DeviceMatrix, SplitThenJoinGivesTheRowsBack) {
  for (auto [rows, cols, in, bound] :
       {std::tuple<int64_t, int64_t, float, float>{1, 16, 0.0f, 0.0f}, {3, 48, 0.5f, 0.0f},
        {37, 528, 0.0f, 3.0f}, {5, 4096, 0.0f, 0.0f}}) {
    const std::vector<uint8_t> host =
        random_rows(rows, cols, static_cast<uint32_t>(rows * cols), in, bound);
    std::vector<uint8_t> dev(fp8_device_bytes(rows, cols), 0xAB);
    fp8_device_split(DType::kF8E4M3, host.data(), rows, cols, dev.data());
    const int64_t rb = dtype_row_bytes(DType::kF8E4M3, cols);
    const size_t off = fp8_device_scale_offset(rows, cols);
    EXPECT_EQ(off % 16, 0u);
    EXPECT_GE(off, static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = host.data() + r * rb;
      ASSERT_EQ(std::memcmp(dev.data() + r * cols, fp8_row_codes(DType::kF8E4M3, row, cols),
                            static_cast<size_t>(cols)),
                0)
          << "codes of row " << r;
      float s;
      std::memcpy(&s, dev.data() + off + 4 * r, 4);
      ASSERT_EQ(std::memcmp(&s, row + 8, 4), 0) << "scale of row " << r;
    }
    const uint8_t* params = dev.data() + fp8_device_params_offset(rows, cols);
    EXPECT_EQ(fp8_device_params_offset(rows, cols), off + 4 * static_cast<size_t>(rows));
    EXPECT_EQ(std::memcmp(params, host.data(), 8), 0) << "input scale and bound";
    EXPECT_EQ(fp8_device_bytes(rows, cols), fp8_device_params_offset(rows, cols) + 8);
    std::vector<uint8_t> back(host.size());
    fp8_device_join(dev.data(), rows, cols, back.data());
    EXPECT_EQ(back, host) << rows << "x" << cols;
  }
}

TEST(Fp8DeviceMatrix, RefusesWhatTheDeviceClassCannotRunByName) {
  const int64_t rows = 4, cols = 64;
  const std::vector<uint8_t> ok = random_rows(rows, cols, 7);
  EXPECT_EQ(refusal(DType::kF8E4M3, ok, rows, cols), "");
  const int64_t rb = dtype_row_bytes(DType::kF8E4M3, cols);

  std::vector<uint8_t> b128(static_cast<size_t>(rows * dtype_row_bytes(DType::kF8E4M3B128, cols)));
  EXPECT_NE(refusal(DType::kF8E4M3B128, b128, rows, cols).find("fp8_e4m3_b128"),
            std::string::npos);

  EXPECT_EQ(refusal(DType::kF8E4M3, random_rows(rows, cols, 8, 0.5f), rows, cols), "");
  EXPECT_EQ(refusal(DType::kF8E4M3, random_rows(rows, cols, 8, 0.0f, 2.0f), rows, cols), "");

  std::vector<uint8_t> stat = ok;
  const float in = 0.5f;
  std::memcpy(stat.data() + 2 * rb, &in, 4);  // row 2 alone: a static input scale
  EXPECT_NE(refusal(DType::kF8E4M3, stat, rows, cols).find("one rule"), std::string::npos);

  std::vector<uint8_t> bound = ok;
  std::memcpy(bound.data() + 3 * rb + 4, &in, 4);  // row 3 alone: an activation bound
  EXPECT_NE(refusal(DType::kF8E4M3, bound, rows, cols).find("one rule"), std::string::npos);

  std::vector<uint8_t> zero = ok;
  const float z = 0.0f;
  std::memcpy(zero.data() + rb + 8, &z, 4);  // row 1: weight scale 0
  EXPECT_NE(refusal(DType::kF8E4M3, zero, rows, cols).find("weight scale"), std::string::npos);

  const std::vector<uint8_t> narrow = random_rows(2, 40, 9);
  EXPECT_NE(refusal(DType::kF8E4M3, narrow, 2, 40).find("multiples of 16"), std::string::npos);
}

}  // namespace
}  // namespace detllm::kernels
