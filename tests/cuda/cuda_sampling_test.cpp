// Device sampling (kernels/cuda/sampling.cu through Ops::sample_rows) against the CPU sampler
// (kernels/sampling/sampler.h): token, logprob and top logprobs bit for bit, on >= 1000 random rows over
// vocab 512, 49152 and 128256 with every parameter kind — rows with different params in one
// launch, ties, -inf, signed zeros, top_k > vocab, top_p = 1, min_p, temperature 0 — and the
// errors (NaN, +inf, all -inf). Every check runs under each sampler layout a test can force
// (blocks a row: chosen, 1, 2, 7, 64; candidate lists: default, tiny, none — the one-block
// search over the whole row): no layout may change a bit. Skips without a GPU. Also prints the
// time per launch at vocab 128256, batch 1, 8 and 256.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
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

// A sampler layout a test forces (CudaOptions::sample_*): none of them may change a bit.
struct Layout {
  int blocks_per_row;      // 0: chosen from the batch
  int candidate_capacity;  // -1: default; 0: no lists
  std::string name() const {
    return "blocks/row " + std::to_string(blocks_per_row) + " lists " +
           std::to_string(candidate_capacity);
  }
};
const Layout kLayouts[] = {{0, -1}, {1, -1}, {2, -1}, {7, -1}, {64, -1},
                           {0, 0},  {7, 0},  {0, 16}, {64, 3}};

std::unique_ptr<Ops> sampling_ops(const Layout& layout) {
  CudaOptions o;
  o.kv_dtype = test_kv_dtype();
  o.sample_blocks_per_row = layout.blocks_per_row;
  o.sample_candidate_capacity = layout.candidate_capacity;
  return make_cuda_ops(o);
}

// Rows of one vocab with their params and the CPU sampler's results, checked on the GPU under
// every layout (one launch a layout).
struct Batch {
  size_t vocab = 0;
  std::vector<float> logits;  // (rows, vocab)
  std::vector<SampleRowParams> params;
  std::vector<SampleRowResult> cpu;
  size_t rows() const { return params.size(); }
  void add(std::span<const float> row, const SampleRowParams& p) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(p);
    cpu.push_back(sample_row(row, p));
  }
};

Batch random_batch(Rng& rng, size_t vocab, size_t rows) {
  Batch b;
  b.vocab = vocab;
  std::vector<float> row(vocab);
  for (size_t r = 0; r < rows; ++r) {
    fill_row(rng, row.data(), vocab);
    b.add(row, random_params(rng, vocab));
  }
  return b;
}

void check_layouts(const std::vector<Batch>& batches, const std::string& label) {
  for (const Layout& layout : kLayouts) {
    auto ops = sampling_ops(layout);
    for (const Batch& b : batches) {
      DeviceArray<float> d_logits(*ops, b.logits);
      std::vector<SampleRowResult> gpu(b.rows());
      ops->sample_rows(d_logits.data(), static_cast<int32_t>(b.rows()),
                       static_cast<int32_t>(b.vocab), b.params.data(), gpu.data());
      for (size_t r = 0; r < b.rows(); ++r) {
        expect_same(gpu[r], b.cpu[r],
                    label + " " + layout.name() + " vocab " + std::to_string(b.vocab) + " row " +
                        std::to_string(r) + " " + describe(b.params[r]));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(CudaSampling, MatchesCpuSamplerBitForBit) {
  DETLLM_SKIP_WITHOUT_GPU();
  Rng rng(11);
  std::vector<Batch> batches;
  size_t total = 0;
  for (const auto& [vocab, rows] : {std::pair<size_t, size_t>{512, 768}, {49152, 256},
                                    {128256, 128}}) {
    batches.push_back(random_batch(rng, vocab, rows));
    total += rows;
  }
  EXPECT_GE(total, 1000u);
  check_layouts(batches, "random");
}

TEST(CudaSampling, OddVocabSizesAndSmallRows) {
  DETLLM_SKIP_WITHOUT_GPU();
  Rng rng(12);
  std::vector<Batch> batches;
  for (size_t vocab : {1, 2, 3, 7, 255, 256, 257, 511, 513, 1000, 4099, 152064})
    batches.push_back(random_batch(rng, vocab, vocab > 10000 ? 16 : 48));
  check_layouts(batches, "odd");
}

// Hand-made rows under hand-made params: all-equal logits, -inf logits, one finite logit,
// top-k larger than the vocab, top-p = 1, min-p, 20 logprobs, ties across bucket edges.
TEST(CudaSampling, EdgeCases) {
  DETLLM_SKIP_WITHOUT_GPU();
  std::vector<SampleRowParams> params;
  const auto param = [&](float t, int32_t k, float top_p, float min_p, int32_t n_logprobs) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.n_logprobs = n_logprobs;
    p.seed = 0x1234u + params.size();
    params.push_back(sample_row_params(p, static_cast<uint32_t>(7 * params.size()), 0));
  };
  param(0.0f, 0, 1.0f, 0.0f, 0);
  param(0.0f, 0, 1.0f, 0.0f, 20);
  param(1.0f, 0, 1.0f, 0.0f, 20);
  param(0.8f, 50, 0.95f, 0.0f, 5);
  param(0.8f, 1 << 30, 1.0f, 0.0f, 20);  // top-k larger than the vocab
  param(1.0f, 0, 1.0f, 0.0f, 0);         // top-p = 1
  param(1.2f, 0, 1.0f, 0.05f, 3);        // min-p
  param(0.7f, 0, 1.0f, 1.0f, 20);        // min-p 1: the max's ties only
  param(2.0f, 7, 0.5f, 0.2f, 20);
  param(1e-20f, 0, 0.999999f, 0.0f, 1);
  param(4.0f, 3000, 1e-6f, 0.0f, 20);
  for (const size_t vocab : {size_t{513}, size_t{49153}, size_t{128256}}) {
    std::vector<std::vector<float>> rows;
    rows.emplace_back(vocab, 0.5f);  // all equal
    rows.emplace_back(vocab, kNegInf);
    rows.back()[vocab / 3] = -3.0f;  // one finite logit
    rows.emplace_back(vocab, kNegInf);
    for (size_t i = 0; i < vocab; i += 97) rows.back()[i] = static_cast<float>(i % 5);  // masked
    rows.emplace_back(vocab);
    for (size_t i = 0; i < vocab; ++i)  // every value on 3 tokens, adjacent floats
      rows.back()[i] = std::nextafter(2.0f, 0.0f) - static_cast<float>(i / 3) * 1e-7f;
    rows.emplace_back(vocab);
    for (size_t i = 0; i < vocab; ++i)  // logits differing by one ulp: logprobs tie
      rows.back()[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(0.001f) +
                                            static_cast<uint32_t>((i * 7919) % 4096));
    rows.emplace_back(vocab, 0.0f);
    for (size_t i = 0; i < vocab; ++i) rows.back()[i] = (i % 2) ? 0.0f : -0.0f;  // signed zeros
    std::vector<Batch> batches(1);
    batches[0].vocab = vocab;
    for (const auto& row : rows)
      for (const SampleRowParams& p : params) batches[0].add(row, p);
    check_layouts(batches, "edge");
    if (HasFailure()) return;
  }
}

TEST(CudaSampling, SameRowDifferentParamsInOneLaunch) {
  DETLLM_SKIP_WITHOUT_GPU();
  Rng rng(13);
  constexpr size_t kVocab = 49152, kRows = 96;
  std::vector<float> row(kVocab);
  fill_row(rng, row.data(), kVocab);
  std::vector<Batch> batches(1);
  batches[0].vocab = kVocab;
  for (size_t r = 0; r < kRows; ++r) batches[0].add(row, random_params(rng, kVocab));
  check_layouts(batches, "same row");
}

TEST(CudaSampling, BadLogitsThrow) {
  DETLLM_SKIP_WITHOUT_GPU();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Layout& layout : kLayouts) {
    auto ops = sampling_ops(layout);
    for (const size_t vocab : {size_t{3}, size_t{50000}}) {
      for (const float bad : {nan, inf, kNegInf}) {
        // the bad value late in the row (another block's part when a row is spread)
        std::vector<float> row(vocab, bad == kNegInf ? kNegInf : 1.0f);
        row[vocab - 2] = bad;
        DeviceArray<float> d(*ops, row);
        SampleRowParams p;
        p.temperature = 0.8f;
        p.n_logprobs = 2;
        SampleRowResult out;
        EXPECT_THROW(ops->sample_rows(d.data(), 1, static_cast<int32_t>(vocab), &p, &out), Error)
            << layout.name() << " vocab " << vocab << " bad " << bad;
      }
    }
  }
  // Invalid parameters are refused once, when the engine adds the request
  // (SampleRowParams::validate, kernels/ops.h): sample_rows does not check them again.
}

// The timed parameter sets (docs/cuda.md "Sampling on the device", Speed).
struct TimedCase {
  const char* name;
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  int32_t n_logprobs;
};
const TimedCase kTimedCases[] = {{"greedy", 0.0f, 0, 1.0f, 0.0f, 0},
                                 {"T=0.8", 0.8f, 0, 1.0f, 0.0f, 0},
                                 {"T=0.8 top_k=50 top_p=0.95", 0.8f, 50, 0.95f, 0.0f, 0},
                                 {"T=1 top_p=0.9 logprobs=5", 1.0f, 0, 0.9f, 0.0f, 5},
                                 {"T=1.2 min_p=0.05", 1.2f, 0, 1.0f, 0.05f, 0}};

std::vector<SampleRowParams> timed_params(const TimedCase& c, size_t rows) {
  std::vector<SampleRowParams> params(rows);
  for (size_t r = 0; r < rows; ++r) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.n_logprobs = c.n_logprobs;
    p.seed = r;
    params[r] = sample_row_params(p, static_cast<uint32_t>(r), 0);
  }
  return params;
}

// Where a call's time goes: the five passes timed by events on the launcher
// (SampleRowsPlan::pass_events), µs per launch, the same logits as the test below.
TEST(CudaSampling, PassTimesAtLlama3Vocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  auto ops = invariant_ops();  // (sets up the device; the passes run on a stream of ours)
  constexpr size_t kVocab = 128256, kRows = 256;
  const std::vector<float> logits = fast_random_floats(kRows * kVocab, 7, -15.0f, 15.0f);
  DeviceArray<float> d_logits(*ops, logits);
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t events[6];
  for (cudaEvent_t& e : events) ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  SampleRowParams* d_params = nullptr;
  SampleRowResult* d_out = nullptr;
  void* scratch = nullptr;
  const cuda::SampleRowsPlan biggest = cuda::plan_sample_rows(kRows, kVocab, {}, sms);
  size_t scratch_bytes = biggest.scratch_bytes;
  for (const int32_t rows : {1, 8}) {
    scratch_bytes =
        std::max(scratch_bytes, cuda::plan_sample_rows(rows, kVocab, {}, sms).scratch_bytes);
  }
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_params), sizeof(SampleRowParams) * kRows),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), sizeof(SampleRowResult) * kRows),
            cudaSuccess);
  ASSERT_EQ(cudaMalloc(&scratch, scratch_bytes), cudaSuccess);
  for (const TimedCase& c : kTimedCases) {
    const std::vector<SampleRowParams> params = timed_params(c, kRows);
    ASSERT_EQ(cudaMemcpyAsync(d_params, params.data(), sizeof(SampleRowParams) * kRows,
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (const int32_t rows : {1, 8, static_cast<int32_t>(kRows)}) {
      cuda::SampleRowsPlan plan = cuda::plan_sample_rows(rows, kVocab, {}, sms);
      plan.pass_events = events;
      constexpr int kRepeats = 5;
      double us[5] = {};
      for (int i = 0; i <= kRepeats; ++i) {  // the first is a warm-up
        ASSERT_EQ(cuda::launch_sample_rows(d_logits.data(), rows, kVocab, d_params, d_out, plan,
                                           scratch, stream),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        for (int k = 0; k < 5 && i > 0; ++k) {
          float ms = 0.0f;
          ASSERT_EQ(cudaEventElapsedTime(&ms, events[k], events[k + 1]), cudaSuccess);
          us[k] += 1000.0 * ms / kRepeats;
        }
      }
      std::printf(
          "sample_rows passes vocab %zu batch %3d %-28s B %3d: max %6.1f hist %7.1f plan %6.1f "
          "collect %6.1f finish %7.1f us, sum %7.1f us\n",
          kVocab, rows, c.name, plan.blocks_per_row, us[0], us[1], us[2], us[3], us[4],
          us[0] + us[1] + us[2] + us[3] + us[4]);
    }
    // spot-check the timed results (the last, whole batch) against the CPU
    std::vector<SampleRowResult> out(kRows);
    ASSERT_EQ(cudaMemcpyAsync(out.data(), d_out, sizeof(SampleRowResult) * kRows,
                              cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (size_t r : {size_t{0}, size_t{131}, kRows - 1}) {
      expect_same(out[r],
                  sample_row(std::span<const float>(logits.data() + r * kVocab, kVocab), params[r]),
                  std::string(c.name) + " passes row " + std::to_string(r));
    }
  }
  cudaFree(scratch);
  cudaFree(d_out);
  cudaFree(d_params);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  cudaStreamDestroy(stream);
}

TEST(CudaSampling, TimePerRowAtLlama3Vocab) {
  DETLLM_SKIP_WITHOUT_GPU();
  constexpr size_t kVocab = 128256, kRows = 256;
  // Peaked rows (logits in +-15) and near-flat ones (+-1, like the synthetic 8B model's
  // N(0, 0.58^2) logits: the top-p and draw boundaries then fall in buckets of tens of
  // thousands of tokens, the candidate lists' hard case), each with the chosen candidate
  // lists and with lists of 4096 (the default before they grew with few rows).
  for (const float spread : {15.0f, 1.0f}) {
    const std::vector<float> logits = fast_random_floats(kRows * kVocab, 7, -spread, spread);
    for (const int capacity : {-1, 4096}) {
      auto ops = sampling_ops({0, capacity});
      std::printf("logits uniform in +-%.0f, candidate lists %s\n", spread,
                  capacity < 0 ? "chosen" : "4096");
      DeviceArray<float> d_logits(*ops, logits);
      std::vector<SampleRowResult> out(kRows);
      for (const TimedCase& c : kTimedCases) {
        const std::vector<SampleRowParams> params = timed_params(c, kRows);
        for (const size_t rows : {size_t{1}, size_t{8}, kRows}) {
          const int32_t n = static_cast<int32_t>(rows);
          ops->sample_rows(d_logits.data(), n, kVocab, params.data(), out.data());  // warm-up
          constexpr int kRepeats = 5;
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < kRepeats; ++i)
            ops->sample_rows(d_logits.data(), n, kVocab, params.data(), out.data());
          const double us = std::chrono::duration<double, std::micro>(
                                std::chrono::steady_clock::now() - start)
                                .count() /
                            kRepeats;
          std::printf(
              "sample_rows vocab %zu batch %3zu %-28s %9.1f us per batch, %6.2f us per row\n",
              kVocab, rows, c.name, us, us / static_cast<double>(rows));
        }
        // spot-check the timed results (the last, whole batch) against the CPU
        for (size_t r : {size_t{0}, size_t{131}, kRows - 1}) {
          expect_same(out[r],
                      sample_row(std::span<const float>(logits.data() + r * kVocab, kVocab),
                                 params[r]),
                      std::string(c.name) + " row " + std::to_string(r));
        }
        // and the batch-1 result, whose lists are the longest
        ops->sample_rows(d_logits.data(), 1, kVocab, params.data(), out.data());
        expect_same(out[0], sample_row(std::span<const float>(logits.data(), kVocab), params[0]),
                    std::string(c.name) + " batch 1");
      }
    }
  }
}

}  // namespace
}  // namespace detllm::kernels::cuda_testing
