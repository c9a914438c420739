// Device sampling (kernels/cuda/sampling.cu through Ops::sample_rows) against the CPU sampler
// (kernels/sampling/sampler.h): token, logprob and top logprobs bit for bit, on >= 1000 random rows over
// vocab 512, 49152 and 128256 with every parameter kind — rows with different params in one
// launch, ties, -inf, signed zeros, top_k > vocab, top_p = 1, min_p, temperature 0 — and the
// errors (NaN, +inf, all -inf). Skips without a GPU. Also prints the time per row at
// vocab 128256, batch 256.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm::kernels::cuda_testing {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class Rng {
 public:
  explicit Rng(uint32_t seed) : engine_(seed) {}
  uint32_t bits() { return static_cast<uint32_t>(engine_()); }
  double uniform() { return static_cast<double>(bits() >> 8) * 0x1p-24; }
  size_t below(size_t n) { return static_cast<size_t>(bits() % n); }

 private:
  std::mt19937 engine_;
};

void fill_row(Rng& rng, float* row, size_t vocab) {
  const size_t kind = rng.below(8);
  for (size_t i = 0; i < vocab; ++i) {
    const double u = rng.uniform();
    float v = 0.0f;
    switch (kind) {
      case 0:
        v = static_cast<float>(u * 20.0 - 10.0);
        break;  // spread
      case 1:
        v = static_cast<float>(std::floor(u * 6.0));
        break;  // many ties
      case 2:
        v = static_cast<float>(u * 0.01);
        break;  // nearly flat
      case 3:
        v = rng.below(4) == 0 ? kNegInf : static_cast<float>(u * 5.0);
        break;  // masked
      case 4:
        v = static_cast<float>(i / 3) * 0.01f;
        break;  // ascending ties
      case 5:
        v = static_cast<float>(-u * u * 60.0);
        break;  // peaked
      case 6:
        v = rng.below(100) == 0 ? static_cast<float>(u) : kNegInf;
        break;  // mostly masked
      default:
        v = static_cast<float>(u * 30.0 - 15.0) * 0.5f;
        break;  // model-like
    }
    if (rng.below(50) == 0) v = rng.below(2) ? 0.0f : -0.0f;  // signed zeros
    row[i] = v;
  }
  if (kind == 3 || kind == 6) row[rng.below(vocab)] = 1.0f;  // at least one finite
}

SampleRowParams random_params(Rng& rng, size_t vocab) {
  static const float kTemperatures[] = {0.0f, 1.0f, 1.0f, 0.7f, 1.3f, 0.05f, 4.0f, 1e-20f};
  static const float kTopP[] = {1.0f, 1.0f, 0.95f, 0.5f, 0.1f, 1e-6f, 0.999999f};
  static const float kMinP[] = {0.0f, 0.0f, 0.05f, 0.3f, 1.0f, 1e-6f};
  SamplingParams p;
  p.temperature = kTemperatures[rng.below(std::size(kTemperatures))];
  const size_t k_kind = rng.below(6);
  p.top_k = k_kind == 0   ? -1
            : k_kind == 1 ? static_cast<int32_t>(1 + rng.below(vocab))
            : k_kind == 2 ? static_cast<int32_t>(vocab + rng.below(3))
            : k_kind == 3 ? static_cast<int32_t>(1 + rng.below(100))
                          : 0;
  p.top_p = kTopP[rng.below(std::size(kTopP))];
  p.min_p = kMinP[rng.below(std::size(kMinP))];
  p.seed = (static_cast<uint64_t>(rng.bits()) << 32) | rng.bits();
  p.n_logprobs = static_cast<int32_t>(rng.below(21));
  return sample_row_params(p, static_cast<uint32_t>(rng.below(100000)),
                           static_cast<uint32_t>(rng.below(4)));
}

std::string describe(const SampleRowParams& p) {
  return "T " + std::to_string(p.temperature) + " top_k " + std::to_string(p.top_k) + " top_p " +
         std::to_string(p.top_p) + " min_p " + std::to_string(p.min_p) + " n_logprobs " +
         std::to_string(p.n_logprobs);
}

void expect_same(const SampleRowResult& gpu, const SampleRowResult& cpu, const std::string& where) {
  EXPECT_EQ(gpu.token, cpu.token) << where;
  EXPECT_EQ(std::bit_cast<uint32_t>(gpu.logprob), std::bit_cast<uint32_t>(cpu.logprob)) << where;
  ASSERT_EQ(gpu.n_top, cpu.n_top) << where;
  for (int j = 0; j < cpu.n_top; ++j) {
    EXPECT_EQ(gpu.top_tokens[j], cpu.top_tokens[j]) << where << " top " << j;
    EXPECT_EQ(std::bit_cast<uint32_t>(gpu.top_logprobs[j]),
              std::bit_cast<uint32_t>(cpu.top_logprobs[j]))
        << where << " top " << j;
  }
}

// rows random rows of `vocab`, each with its own params, in one launch.
void check_batch(Ops& ops, Rng& rng, size_t vocab, size_t rows, const std::string& label) {
  std::vector<float> logits(rows * vocab);
  std::vector<SampleRowParams> params(rows);
  for (size_t r = 0; r < rows; ++r) {
    fill_row(rng, logits.data() + r * vocab, vocab);
    params[r] = random_params(rng, vocab);
  }
  DeviceArray<float> d_logits(ops, logits);
  std::vector<SampleRowResult> gpu(rows);
  ops.sample_rows(d_logits.data(), static_cast<int32_t>(rows), static_cast<int32_t>(vocab),
                  params.data(), gpu.data());
  for (size_t r = 0; r < rows; ++r) {
    const SampleRowResult cpu =
        sample_row(std::span<const float>(logits.data() + r * vocab, vocab), params[r]);
    expect_same(gpu[r], cpu,
                label + " vocab " + std::to_string(vocab) + " row " + std::to_string(r) + " " +
                    describe(params[r]));
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(CudaSampling, MatchesCpuSamplerBitForBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  Rng rng(11);
  int total = 0;
  for (int batch = 0; batch < 12; ++batch) {  // 12 x 64 rows at vocab 512
    check_batch(*ops, rng, 512, 64, "batch " + std::to_string(batch));
    total += 64;
    if (HasFailure()) return;
  }
  for (int batch = 0; batch < 4; ++batch) {  // 4 x 64 at 49152
    check_batch(*ops, rng, 49152, 64, "batch " + std::to_string(batch));
    total += 64;
    if (HasFailure()) return;
  }
  for (int batch = 0; batch < 2; ++batch) {  // 2 x 64 at 128256
    check_batch(*ops, rng, 128256, 64, "batch " + std::to_string(batch));
    total += 64;
    if (HasFailure()) return;
  }
  EXPECT_GE(total, 1000);
}

TEST(CudaSampling, OddVocabSizesAndSmallRows) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  Rng rng(12);
  for (size_t vocab : {1, 2, 3, 7, 255, 256, 257, 511, 513, 1000, 4099, 152064}) {
    check_batch(*ops, rng, vocab, vocab > 10000 ? 16 : 48, "odd");
    if (HasFailure()) return;
  }
}

TEST(CudaSampling, SameRowDifferentParamsInOneLaunch) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  Rng rng(13);
  constexpr size_t kVocab = 49152, kRows = 96;
  std::vector<float> row(kVocab);
  fill_row(rng, row.data(), kVocab);
  std::vector<float> logits;
  std::vector<SampleRowParams> params;
  for (size_t r = 0; r < kRows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(random_params(rng, kVocab));
  }
  DeviceArray<float> d_logits(*ops, logits);
  std::vector<SampleRowResult> gpu(kRows);
  ops->sample_rows(d_logits.data(), kRows, kVocab, params.data(), gpu.data());
  for (size_t r = 0; r < kRows; ++r) {
    expect_same(gpu[r], sample_row(row, params[r]),
                "row " + std::to_string(r) + " " + describe(params[r]));
  }
}

TEST(CudaSampling, BadLogitsThrow) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& row :
       {std::vector<float>{1.0f, nan, 2.0f}, std::vector<float>{1.0f, inf, 2.0f},
        std::vector<float>{kNegInf, kNegInf, kNegInf}}) {
    DeviceArray<float> d(*ops, row);
    SampleRowParams p;
    SampleRowResult out;
    EXPECT_THROW(ops->sample_rows(d.data(), 1, 3, &p, &out), Error);
  }
  SampleRowParams bad;
  bad.top_p = 1.5f;
  DeviceArray<float> d(*ops, std::vector<float>{1.0f, 2.0f});
  SampleRowResult out;
  EXPECT_THROW(ops->sample_rows(d.data(), 1, 2, &bad, &out), Error);
}

TEST(CudaSampling, TimePerRowAtLlama3Vocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();
  constexpr size_t kVocab = 128256, kRows = 256;
  const std::vector<float> logits = fast_random_floats(kRows * kVocab, 7, -15.0f, 15.0f);
  DeviceArray<float> d_logits(*ops, logits);
  std::vector<SampleRowResult> out(kRows);
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    int32_t n_logprobs;
  };
  for (const Case& c :
       {Case{"greedy", 0.0f, 0, 1.0f, 0.0f, 0}, Case{"T=0.8", 0.8f, 0, 1.0f, 0.0f, 0},
        Case{"T=0.8 top_k=50 top_p=0.95", 0.8f, 50, 0.95f, 0.0f, 0},
        Case{"T=1 top_p=0.9 logprobs=5", 1.0f, 0, 0.9f, 0.0f, 5},
        Case{"T=1.2 min_p=0.05", 1.2f, 0, 1.0f, 0.05f, 0}}) {
    std::vector<SampleRowParams> params(kRows);
    for (size_t r = 0; r < kRows; ++r) {
      SamplingParams p;
      p.temperature = c.temperature;
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      p.n_logprobs = c.n_logprobs;
      p.seed = r;
      params[r] = sample_row_params(p, static_cast<uint32_t>(r), 0);
    }
    for (const size_t rows : {size_t{1}, size_t{8}, kRows}) {
      const int32_t n = static_cast<int32_t>(rows);
      ops->sample_rows(d_logits.data(), n, kVocab, params.data(), out.data());  // warm-up
      constexpr int kRepeats = 5;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kRepeats; ++i)
        ops->sample_rows(d_logits.data(), n, kVocab, params.data(), out.data());
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          kRepeats;
      std::printf("sample_rows vocab %zu batch %3zu %-28s %9.1f us per batch, %6.2f us per row\n",
                  kVocab, rows, c.name, us, us / static_cast<double>(rows));
    }
    // spot-check the timed results (the last, whole batch) against the CPU
    for (size_t r : {size_t{0}, size_t{131}, kRows - 1}) {
      expect_same(out[r],
                  sample_row(std::span<const float>(logits.data() + r * kVocab, kVocab), params[r]),
                  std::string(c.name) + " row " + std::to_string(r));
    }
  }
}

}  // namespace
}  // namespace detllm::kernels::cuda_testing
