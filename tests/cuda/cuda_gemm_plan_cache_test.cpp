// Persisted GEMM plans (gemm_lt.h, kernels/gemm_plan_file.h) on the GPU: tune and save, reload
// in a fresh backend — the same plans, none tuned, every persisted cuBLASLt plan re-verified
// (counted) and giving the kernel's bits; a tampered algorithm entry, a reference the
// persisted plans no longer match, a truncated and a foreign file are each refused with a
// warning and tuned again, and the file is rewritten.
// Run: build-cuda/tests/test_cuda --gtest_filter='CudaGemmPlanCache*' (skips without a GPU).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_lt.h"
#include "kernels/gemm_buckets.h"
#include "kernels/gemm_plan_file.h"

namespace detllm::kernels {
namespace {

using namespace cuda_testing;
namespace fs = std::filesystem;

// o_proj of Llama-8B: cuBLASLt wins there from small M on (docs/cuda.md), so plans of both
// kinds are in the file. Buckets 1 … 2048.
constexpr int kN = 4096, kK = 4096, kMaxM = 2048;
constexpr int kBuckets = 24;  // 1 … 128, 160 … 256, 320 … 512, 640 … 1024, 1280 … 2048

class CudaGemmPlanCache : public ::testing::Test {
 protected:
  void SetUp() override {
    DETLLM_SKIP_WITHOUT_GPU();
    dir_ = fs::temp_directory_path() /
           ("detllm_gemm_plan_cache_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    path_ = (dir_ / "plans.bin").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Ops> ops_with_cache() const {
    CudaOptions o;
    o.gemm_plan_cache = {.enabled = true, .path = path_};
    return make_cuda_ops(o);
  }
  // Makes every bucket's plan for a weight of the shape (the weight's values are the same in
  // every backend: the same seed).
  static void prepare(Ops& ops, DeviceArray<uint16_t>& w) {
    ops.prepare_matmul(WeightMatrix{w.data(), DType::kBF16, kN, kK}, kMaxM);
    ops.synchronize();
  }
  static DeviceArray<uint16_t> weight(Ops& ops) {
    return DeviceArray<uint16_t>(ops,
                                 to_bf16(fast_random_floats(size_t(kN) * kK, 71, -0.05f, 0.05f)));
  }
  static std::vector<std::string> choices(const Ops& ops) {
    std::vector<std::string> out;
    for (const auto& line : cuda_gemm_plan_report(ops)) out.push_back(line.substr(0, line.find('|')));
    return out;
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(CudaGemmPlanCache, SaveReloadReverify) {
  auto a = ops_with_cache();
  auto wa = weight(*a);
  prepare(*a, wa);
  const CudaGemmPlanFileSummary sa = cuda_gemm_plan_file_summary(*a);
  EXPECT_EQ(sa.path, path_);
  EXPECT_EQ(sa.plans, kBuckets);
  EXPECT_EQ(sa.tuned, kBuckets);
  EXPECT_EQ(sa.reverified, 0);
  EXPECT_GE(sa.saves, 1);
  EXPECT_TRUE(sa.warnings.empty());
  ASSERT_TRUE(fs::exists(path_));
  const int n_lt = cuda_gemm_lt_plan_count(*a);
  ASSERT_GT(n_lt, 0) << "no plan chose cuBLASLt: re-verification would be vacuous";
  const GemmPlanLoad file = load_gemm_plan_file(path_, cuda::LtGemm::plan_file_key());
  EXPECT_TRUE(file.warning.empty()) << file.warning;
  EXPECT_EQ(file.entries.size(), size_t(kBuckets));

  // A fresh backend: every plan from the file, the cuBLASLt ones re-verified, none tuned.
  auto b = ops_with_cache();
  auto wb = weight(*b);
  prepare(*b, wb);
  const CudaGemmPlanFileSummary sb = cuda_gemm_plan_file_summary(*b);
  EXPECT_EQ(sb.tuned, 0);
  EXPECT_EQ(sb.rejected, 0);
  EXPECT_EQ(sb.reverified, n_lt);
  EXPECT_EQ(sb.kernel_from_file, kBuckets - n_lt);
  EXPECT_EQ(sb.saves, 0) << "nothing new: the file is not rewritten";
  EXPECT_TRUE(sb.warnings.empty());
  EXPECT_EQ(cuda_gemm_lt_plan_count(*b), n_lt);
  const std::vector<std::string> ca = choices(*a), cb = choices(*b);
  ASSERT_EQ(ca.size(), cb.size());
  for (size_t i = 0; i < ca.size(); ++i) EXPECT_EQ(ca[i], cb[i]) << "plan " << i;
  for (const auto& line : cuda_gemm_plan_report(*b)) std::printf("[plan] %s\n", line.c_str());

  // And the reloaded plans give the kernel's bits.
  CudaOptions ko;
  ko.gemm_lt = false;
  auto kernel_only = make_cuda_ops(ko);
  auto wk = weight(*kernel_only);
  DeviceArray<float> xb(*b, fast_random_floats(size_t(kMaxM) * kK, 72));
  DeviceArray<float> xk(*kernel_only, fast_random_floats(size_t(kMaxM) * kK, 72));
  DeviceArray<float> yb(*b, size_t(kMaxM) * kN), yk(*kernel_only, size_t(kMaxM) * kN);
  for (int m : {1, 5, 64, 300, 1500, kMaxM}) {
    b->matmul(xb.data(), m, WeightMatrix{wb.data(), DType::kBF16, kN, kK}, nullptr, yb.data());
    kernel_only->matmul(xk.data(), m, WeightMatrix{wk.data(), DType::kBF16, kN, kK}, nullptr,
                        yk.data());
    const auto got = yb.download(size_t(m) * kN), want = yk.download(size_t(m) * kN);
    EXPECT_EQ(first_bit_difference(got.data(), want.data(), int64_t(m) * kN), -1) << "m " << m;
  }
}

TEST_F(CudaGemmPlanCache, TamperedAlgorithmIsRejected) {
  {
    auto a = ops_with_cache();
    auto w = weight(*a);
    prepare(*a, w);
  }
  // Split-K forced to 2 in one cuBLASLt entry: a well-formed file (valid checksum) whose
  // algorithm would sum K in another order.
  GemmPlanLoad l = load_gemm_plan_file(path_, cuda::LtGemm::plan_file_key());
  ASSERT_EQ(l.entries.size(), size_t(kBuckets));
  int tampered = -1;
  for (size_t i = 0; i < l.entries.size() && tampered < 0; ++i) {
    if (!l.entries[i].use_lt) continue;
    cublasLtMatmulAlgo_t algo;
    std::memcpy(&algo, l.entries[i].algo.data(), sizeof(algo));
    const uint32_t splitk = 2, red = CUBLASLT_REDUCTION_SCHEME_INPLACE;
    ASSERT_EQ(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                                   sizeof(splitk)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                   &red, sizeof(red)),
              CUBLAS_STATUS_SUCCESS);
    std::memcpy(l.entries[i].algo.data(), &algo, sizeof(algo));
    tampered = static_cast<int>(i);
  }
  ASSERT_GE(tampered, 0);
  write_gemm_plan_file(path_, GemmPlanFile{cuda::LtGemm::plan_file_key(), l.entries});

  auto c = ops_with_cache();
  auto w = weight(*c);
  prepare(*c, w);
  const CudaGemmPlanFileSummary s = cuda_gemm_plan_file_summary(*c);
  EXPECT_EQ(s.rejected, 1);
  EXPECT_EQ(s.tuned, 1);
  EXPECT_EQ(s.plans, kBuckets);
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("rejected"), std::string::npos) << s.warnings[0];
  EXPECT_GE(s.saves, 1);
  // The rewritten file holds a plan that passes again.
  auto d = ops_with_cache();
  auto wd = weight(*d);
  prepare(*d, wd);
  EXPECT_EQ(cuda_gemm_plan_file_summary(*d).rejected, 0);
  EXPECT_EQ(cuda_gemm_plan_file_summary(*d).tuned, 0);
}

// The bit comparison itself: a planner whose reference (the invariant kernel) no longer gives
// the bits the persisted plans were verified against — as after a change of the kernel's
// order — re-verifies every persisted cuBLASLt plan, refuses each, and finds none bit-equal.
TEST_F(CudaGemmPlanCache, PlansThatNoLongerMatchTheKernelAreRejected) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const cuda::GemmScratchNeed need = cuda::gemm_scratch_need(kMaxM, kN, kK, -1, 0);
  void *xb = nullptr, *partials = nullptr, *counters = nullptr;
  ASSERT_EQ(cudaMalloc(&xb, std::max<size_t>(need.x_bf16, 16)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&partials, std::max<size_t>(need.partials, 16)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&counters, std::max<size_t>(need.counters, 16)), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(counters, 0, std::max<size_t>(need.counters, 16), stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const cuda::GemmScratch scratch{static_cast<uint16_t*>(xb), static_cast<float*>(partials),
                                  static_cast<int32_t*>(counters)};
  bool perturb = false;
  auto kernel = [&](const float* x, int32_t m, const uint16_t* w, int64_t n, int64_t k,
                    float* y) {
    cudaError_t err = cuda::launch_gemm_invariant(x, m, w, n, k, nullptr, y, scratch, -1, 0,
                                                  stream);
    if (err == cudaSuccess && perturb) err = cudaMemsetAsync(y, 0x7f, 4, stream);  // y[0] differs
    return err;
  };
  auto memory = invariant_ops();  // owns the weight's memory
  DeviceArray<uint16_t> w(*memory,
                          to_bf16(fast_random_floats(size_t(kN) * kK, 71, -0.05f, 0.05f)));
  memory->synchronize();
  int n_lt = 0;
  {
    cuda::LtGemm g(stream, kernel, path_);
    for (int b = 1; b <= kMaxM; b = gemm_bucket_above(b)) n_lt += g.prefers_lt(b, w.data(), kN, kK);
    EXPECT_EQ(g.plan_file_stats().tuned, kBuckets);
  }
  ASSERT_GT(n_lt, 0);
  {
    cuda::LtGemm g(stream, kernel, path_);  // the same reference: everything passes
    for (int b = 1; b <= kMaxM; b = gemm_bucket_above(b)) g.prefers_lt(b, w.data(), kN, kK);
    EXPECT_EQ(g.plan_file_stats().reverified, n_lt);
    EXPECT_EQ(g.plan_file_stats().tuned, 0);
  }
  perturb = true;
  {
    cuda::LtGemm g(stream, kernel, path_);
    int lt_now = 0;
    for (int b = 1; b <= kMaxM; b = gemm_bucket_above(b)) lt_now += g.prefers_lt(b, w.data(), kN, kK);
    const cuda::LtPlanFileStats& s = g.plan_file_stats();
    EXPECT_EQ(s.reverified, 0);
    EXPECT_EQ(s.rejected, n_lt);
    EXPECT_EQ(s.tuned, n_lt);
    EXPECT_EQ(s.kernel_from_file, kBuckets - n_lt);
    EXPECT_EQ(lt_now, 0) << "a cuBLASLt plan passed against a reference it cannot match";
    for (const auto& r : g.reports())
      if (!r.from_file) {
        EXPECT_EQ(r.bit_equal, 0) << "bucket " << r.bucket;
      }
  }
  cudaFree(xb);
  cudaFree(partials);
  cudaFree(counters);
  cudaStreamDestroy(stream);
}

TEST_F(CudaGemmPlanCache, TruncatedAndForeignFilesAreTunedAgain) {
  {
    auto a = ops_with_cache();
    auto w = weight(*a);
    prepare(*a, w);
  }
  fs::resize_file(path_, fs::file_size(path_) / 2);
  {
    auto c = ops_with_cache();
    auto w = weight(*c);
    prepare(*c, w);
    const CudaGemmPlanFileSummary s = cuda_gemm_plan_file_summary(*c);
    ASSERT_FALSE(s.warnings.empty());
    EXPECT_NE(s.warnings[0].find("truncated"), std::string::npos) << s.warnings[0];
    EXPECT_EQ(s.tuned, kBuckets);
  }
  const GemmPlanLoad rewritten = load_gemm_plan_file(path_, cuda::LtGemm::plan_file_key());
  EXPECT_TRUE(rewritten.warning.empty()) << rewritten.warning;
  EXPECT_EQ(rewritten.entries.size(), size_t(kBuckets));

  // Written for another GPU: none of it is used.
  write_gemm_plan_file(path_, GemmPlanFile{"gpu=another", rewritten.entries});
  auto f = ops_with_cache();
  auto w = weight(*f);
  prepare(*f, w);
  const CudaGemmPlanFileSummary s = cuda_gemm_plan_file_summary(*f);
  ASSERT_FALSE(s.warnings.empty());
  EXPECT_NE(s.warnings[0].find("another GPU"), std::string::npos) << s.warnings[0];
  EXPECT_EQ(s.tuned, kBuckets);
  EXPECT_EQ(s.reverified, 0);
}

// The key names the device, its driver and libraries, the GEMM numerics rule and the kernel's
// schedules (the plans were timed against them).
TEST_F(CudaGemmPlanCache, KeyNamesTheMachine) {
  auto ops = invariant_ops();  // selects the device
  const std::string key = cuda::LtGemm::plan_file_key();
  for (const char* part : {"gpu=", ";uuid=", ";driver=", ";runtime=", ";cublaslt=", ";gemm=",
                           ";kernels=", ";workspace="})
    EXPECT_NE(key.find(part), std::string::npos) << key;
  EXPECT_NE(key.find(std::string(cuda::kGemmNumericsRule)), std::string::npos);
  EXPECT_NE(key.find(std::string(cuda::kGemmKernelSchedules)), std::string::npos);
  std::printf("[key] %s\n", key.c_str());
}

}  // namespace
}  // namespace detllm::kernels
