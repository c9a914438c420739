// The device form of an FP8 matrix (kernels/fp8_device_matrix.h): split then joined gives the
// host rows byte for byte (codes and scales where the CUDA GEMMs read them: codes at r · cols,
// row r's scales at r · n_w after the 16-byte-rounded codes, then the activation rule), for
// per-channel and 128-column block scales, with dynamic, static and bounded activations; what
// the device form cannot hold — a type that is not FP8 rows, rows of one matrix with different
// activation rules, columns not a multiple of 16, a bad scale — is refused by name, never
// dropped. Run: build/tests/test_kernels --gtest_filter='Fp8DeviceMatrix*'.
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

// Rows of type t: per-channel rows from random values; for the block types the same codes with
// a distinct scale per 128-column block.
std::vector<uint8_t> random_rows(int64_t rows, int64_t cols, uint32_t seed,
                                 float input_scale = 0.0f, float bound = 0.0f,
                                 DType t = DType::kF8E4M3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  const int64_t rc = dtype_row_bytes(DType::kF8E4M3, cols), rb = dtype_row_bytes(t, cols);
  std::vector<uint8_t> channel(static_cast<size_t>(rc)), out(static_cast<size_t>(rows * rb));
  std::vector<float> w(static_cast<size_t>(cols));
  std::vector<float> scales(static_cast<size_t>(fp8_row_scales(t, cols) - 2));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : w) v = u(rng) * static_cast<float>(r + 1);
    ref::fp8_quantize_weight_row(w.data(), cols, channel.data());
    for (size_t j = 0; j < scales.size(); ++j)
      scales[j] = fp8_row_weight_scale(channel.data(), 0) * static_cast<float>(j + 1);
    uint8_t* row = out.data() + r * rb;
    fp8_write_row_header(t, row, cols, input_scale, bound, scales.data());
    std::memcpy(row + 4 * fp8_row_scales(t, cols), fp8_row_codes(DType::kF8E4M3, channel.data(), cols),
                static_cast<size_t>(cols));
  }
  return out;
}

std::string refusal(DType t, const std::vector<uint8_t>& rows, int64_t n, int64_t cols) {
  std::vector<uint8_t> out(dtype_is_fp8(t) ? fp8_device_bytes(t, n, cols) : 1 << 16);
  try {
    fp8_device_split(t, rows.data(), n, cols, out.data());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8DeviceMatrix, SplitThenJoinGivesTheRowsBack) {
  for (DType t : {DType::kF8E4M3, DType::kF8E4M3B128, DType::kF8E4M3G128})
  for (auto [rows, cols, in, bound] :
       {std::tuple<int64_t, int64_t, float, float>{1, 16, 0.0f, 0.0f}, {3, 48, 0.5f, 0.0f},
        {37, 528, 0.0f, 3.0f}, {5, 4096, 0.0f, 0.0f}}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> host =
        random_rows(rows, cols, static_cast<uint32_t>(rows * cols), in, bound, t);
    std::vector<uint8_t> dev(fp8_device_bytes(t, rows, cols), 0xAB);
    fp8_device_split(t, host.data(), rows, cols, dev.data());
    const int64_t rb = dtype_row_bytes(t, cols), nw = fp8_device_row_scales(t, cols);
    EXPECT_EQ(nw, t == DType::kF8E4M3 ? 1 : (cols + 127) / 128);
    const size_t off = fp8_device_scale_offset(t, rows, cols);
    EXPECT_EQ(off % 16, 0u);
    EXPECT_GE(off, static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = host.data() + r * rb;
      ASSERT_EQ(std::memcmp(dev.data() + r * cols, fp8_row_codes(t, row, cols),
                            static_cast<size_t>(cols)),
                0)
          << "codes of row " << r;
      // Row r's scales at r · n_w, in block order.
      ASSERT_EQ(std::memcmp(dev.data() + off + 4 * r * nw, row + 8, 4 * static_cast<size_t>(nw)), 0)
          << "scales of row " << r;
    }
    const uint8_t* params = dev.data() + fp8_device_params_offset(t, rows, cols);
    EXPECT_EQ(fp8_device_params_offset(t, rows, cols), off + 4 * static_cast<size_t>(rows * nw));
    EXPECT_EQ(std::memcmp(params, host.data(), 8), 0) << "input scale and bound";
    EXPECT_EQ(fp8_device_bytes(t, rows, cols), fp8_device_params_offset(t, rows, cols) + 8);
    std::vector<uint8_t> back(host.size());
    fp8_device_join(t, dev.data(), rows, cols, back.data());
    EXPECT_EQ(back, host) << rows << "x" << cols;
  }
}

TEST(Fp8DeviceMatrix, RefusesWhatTheDeviceClassCannotRunByName) {
  const int64_t rows = 4, cols = 64;
  const std::vector<uint8_t> ok = random_rows(rows, cols, 7);
  EXPECT_EQ(refusal(DType::kF8E4M3, ok, rows, cols), "");
  const int64_t rb = dtype_row_bytes(DType::kF8E4M3, cols);

  EXPECT_EQ(refusal(DType::kF8E4M3G128, random_rows(rows, cols, 7, 0, 0, DType::kF8E4M3G128),
                    rows, cols), "");
  EXPECT_NE(refusal(DType::kBF16, ok, rows, cols).find("are not FP8 rows"), std::string::npos);
  std::vector<uint8_t> zero_block = random_rows(rows, 256, 7, 0, 0, DType::kF8E4M3B128);
  const float z0 = 0.0f;
  std::memcpy(zero_block.data() + 8 + 4, &z0, 4);  // row 0, block 1: scale 0
  EXPECT_NE(refusal(DType::kF8E4M3B128, zero_block, rows, 256).find("(block 1)"),
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
