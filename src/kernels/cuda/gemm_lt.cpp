// LtGemm: verified cuBLASLt plans for the invariant GEMM (see gemm_lt.h for the why).
#include "kernels/cuda/gemm_lt.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;
constexpr int32_t kMaxBucket = 8192;
constexpr int64_t kMaxTuneOutput = int64_t{256} << 20;  // y elements per tuning buffer (1 GiB)
constexpr int kHeuristics = 8;                          // algorithms asked per problem
constexpr int kTimedRuns = 5;

void lt_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_error("cuBLASLt error in {}: {} ({})", what, cublasGetStatusString(st),
                static_cast<int>(st));
}
void cu_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw_error("CUDA error in {}: {} ({})", what, cudaGetErrorString(err), static_cast<int>(err));
}

// Layouts of one call: W window (kk × n, ld k, used transposed), x window (kk × m, ld k),
// y (n × m column-major = (m, n) row-major).
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Layouts(int64_t m, int64_t n, int64_t kk, int64_t ld) {
    lt_check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, static_cast<uint64_t>(kk),
                                        static_cast<uint64_t>(n), ld),
             "layout A");
    lt_check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, static_cast<uint64_t>(kk),
                                        static_cast<uint64_t>(m), ld),
             "layout B");
    lt_check(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, static_cast<uint64_t>(n),
                                        static_cast<uint64_t>(m), n),
             "layout C");
  }
  ~Layouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
  }
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
};

std::string algo_text(const cublasLtMatmulAlgo_t& a) {
  int id = 0;
  uint32_t tile = 0, splitk = 0, red = 0;
  uint16_t cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &w);
  return fmt::format("algo {} tile {} splitK {} reduction {} cluster {}", id, tile, splitk, red,
                     cluster);
}

// Cheap deterministic activations in [-1, 1).
void fill_random(std::vector<float>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(s >> 40) * 0x1.0p-23f - 1.0f;
  }
}

// Device buffers of one tuning session, freed at the end.
struct DeviceBuf {
  void* p = nullptr;
  explicit DeviceBuf(size_t bytes) {
    cu_check(cudaMalloc(&p, std::max<size_t>(bytes, 16)), "tuning cudaMalloc");
  }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

}  // namespace

int32_t lt_bucket(int32_t m) {
  int32_t b = 1;
  while (b < m && b < kMaxBucket) b *= 2;
  return b;
}

struct LtGemm::Exec {
  bool chain = false;  // S unsplit calls over the K slices, merged through beta = 1
  int splits = 1;      // S of the shape
  cublasLtMatmulAlgo_t algo{};
  std::string text;
};

struct LtGemm::Plan {
  bool use_lt = false;
  Exec exec;
  cublasLtMatmulDesc_t op = nullptr;
  LtPlanReport report;
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

LtGemm::LtGemm(cudaStream_t stream, KernelFn kernel) : stream_(stream), kernel_(std::move(kernel)) {
  lt_check(cublasLtCreate(&lt_), "cublasLtCreate");
  cu_check(cudaMalloc(&workspace_, kWorkspaceBytes), "cuBLASLt workspace");
  workspace_bytes_ = kWorkspaceBytes;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (lt_) cublasLtDestroy(lt_);
}

std::vector<LtPlanReport> LtGemm::reports() const {
  std::vector<LtPlanReport> out;
  for (const auto& [key, plan] : plans_) out.push_back(plan->report);
  return out;
}

cudaError_t LtGemm::launch(cublasLtMatmulDesc_t op, const Exec& e, const uint16_t* x_bf16,
                           int32_t m, const uint16_t* w, int64_t n, int64_t k, float* y) {
  const float one = 1.0f, zero = 0.0f;
  if (!e.chain) {
    Layouts l(m, n, k, k);
    const cublasStatus_t st = cublasLtMatmul(lt_, op, &one, w, l.a, x_bf16, l.b, &zero, y, l.c, y,
                                             l.c, &e.algo, workspace_, workspace_bytes_, stream_);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
  }
  const int64_t ks = k / e.splits;
  Layouts l(m, n, ks, k);
  for (int s = 0; s < e.splits; ++s) {
    const float beta = s == 0 ? 0.0f : 1.0f;  // y = acc_s + y: ((p0 + p1) + p2) + …
    const cublasStatus_t st =
        cublasLtMatmul(lt_, op, &one, w + s * ks, l.a, x_bf16 + s * ks, l.b, s == 0 ? &zero : &beta,
                       y, l.c, y, l.c, &e.algo, workspace_, workspace_bytes_, stream_);
    if (st != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
  }
  return cudaSuccess;
}

LtGemm::Plan& LtGemm::tune(const uint16_t* w, int64_t n, int64_t k, int32_t bucket) {
  auto plan = std::make_unique<Plan>();
  lt_check(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
           "transa");
  lt_check(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)),
           "transb");
  const int splits = gemm_split_count(n, k);
  const int32_t m =
      static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(bucket, kMaxTuneOutput / n)));
  LtPlanReport& rep = plan->report;
  rep.n = n;
  rep.k = k;
  rep.bucket = bucket;
  rep.tuned_m = m;
  rep.choice = "invariant-kernel";

  // Activations (fp32 for the kernel, bf16 for cuBLASLt: the same rounding as the kernel's).
  std::vector<float> xh(static_cast<size_t>(m) * k);
  fill_random(xh, static_cast<uint64_t>(n * 131 + k * 7 + bucket));
  DeviceBuf x32(xh.size() * 4), x16(xh.size() * 2), y_ref(size_t(m) * n * 4), y(size_t(m) * n * 4);
  cu_check(cudaMemcpyAsync(x32.p, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice, stream_),
           "tuning upload");
  cu_check(launch_f32_to_bf16(x32.as<float>(), static_cast<int64_t>(xh.size()), x16.as<uint16_t>(),
                              stream_),
           "tuning f32_to_bf16");
  cu_check(kernel_(x32.as<float>(), m, w, n, k, y_ref.as<float>()), "tuning reference");
  std::vector<float> ref(size_t(m) * n), got(ref.size());
  cu_check(cudaMemcpyAsync(ref.data(), y_ref.p, ref.size() * 4, cudaMemcpyDeviceToHost, stream_),
           "tuning download");
  cu_check(cudaStreamSynchronize(stream_), "tuning sync");

  cudaEvent_t e0, e1;
  cu_check(cudaEventCreate(&e0), "event");
  cu_check(cudaEventCreate(&e1), "event");
  auto time_us = [&](const std::function<cudaError_t()>& call) {
    double best = std::numeric_limits<double>::infinity();
    if (call() != cudaSuccess || call() != cudaSuccess) return best;
    for (int r = 0; r < kTimedRuns; ++r) {
      cudaEventRecord(e0, stream_);
      const cudaError_t err = call();
      cudaEventRecord(e1, stream_);
      cudaEventSynchronize(e1);
      if (err != cudaSuccess) return std::numeric_limits<double>::infinity();
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      best = std::min(best, 1000.0 * ms);
    }
    return best;
  };
  rep.kernel_us = time_us([&] { return kernel_(x32.as<float>(), m, w, n, k, y.as<float>()); });
  rep.chosen_us = rep.kernel_us;
  Plan& p = *plan;

  // Candidates: heuristic algorithms of the whole problem with split-K forced to S (each
  // reduction scheme), and of one K slice, unsplit, for the chain.
  auto heuristics = [&](int64_t kk) {
    Layouts l(m, n, kk, k);
    cublasLtMatmulPreference_t pref;
    lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
    lt_check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &workspace_bytes_, sizeof(workspace_bytes_)),
             "preference workspace");
    std::vector<cublasLtMatmulHeuristicResult_t> r(kHeuristics);
    int got_n = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, p.op, l.a, l.b, l.c, l.c, pref,
                                                             kHeuristics, r.data(), &got_n);
    cublasLtMatmulPreferenceDestroy(pref);
    std::vector<cublasLtMatmulAlgo_t> out;
    if (st == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < got_n; ++i)
        if (r[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
          out.push_back(r[static_cast<size_t>(i)].algo);
    return out;
  };
  auto configure = [&](cublasLtMatmulAlgo_t& a, uint32_t splitk, uint32_t red, int64_t kk) {
    if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof(splitk)) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                             sizeof(red)) != CUBLAS_STATUS_SUCCESS)
      return false;
    Layouts l(m, n, kk, k);
    cublasLtMatmulHeuristicResult_t res{};
    return cublasLtMatmulAlgoCheck(lt_, p.op, l.a, l.b, l.c, l.c, &a, &res) ==
               CUBLAS_STATUS_SUCCESS &&
           res.workspaceSize <= workspace_bytes_;
  };
  std::vector<Exec> candidates;
  for (const auto& a0 : heuristics(k)) {
    if (splits == 1) {
      Exec e{false, 1, a0, ""};
      if (configure(e.algo, 1, CUBLASLT_REDUCTION_SCHEME_NONE, k)) candidates.push_back(e);
      continue;
    }
    for (uint32_t red :
         {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE}) {
      Exec e{false, splits, a0, ""};
      if (configure(e.algo, static_cast<uint32_t>(splits), red, k)) candidates.push_back(e);
    }
  }
  if (splits > 1)
    for (const auto& a0 : heuristics(k / splits)) {
      Exec e{true, splits, a0, ""};
      if (configure(e.algo, 1, CUBLASLT_REDUCTION_SCHEME_NONE, k / splits)) candidates.push_back(e);
    }

  for (Exec& c : candidates) {
    c.text = (c.chain ? "lt-chain " : "lt-splitk ") + algo_text(c.algo);
    ++rep.candidates;
    cudaMemsetAsync(y.p, 0xff, size_t(m) * n * 4, stream_);  // NaN: a skipped write shows
    if (launch(p.op, c, x16.as<uint16_t>(), m, w, n, k, y.as<float>()) != cudaSuccess) continue;
    cu_check(cudaMemcpyAsync(got.data(), y.p, got.size() * 4, cudaMemcpyDeviceToHost, stream_),
             "tuning download");
    cu_check(cudaStreamSynchronize(stream_), "tuning sync");
    if (std::memcmp(got.data(), ref.data(), got.size() * 4) != 0) continue;
    // And at a second M of the bucket: an execution whose K order followed M (stream-K,
    // occupancy-chosen splits) would show here; the kernel's rows are the same at any M.
    const int32_t m2 = bucket / 2 + 1;
    if (m2 < m) {
      cudaMemsetAsync(y.p, 0xff, size_t(m2) * n * 4, stream_);
      if (launch(p.op, c, x16.as<uint16_t>(), m2, w, n, k, y.as<float>()) != cudaSuccess) continue;
      cu_check(
          cudaMemcpyAsync(got.data(), y.p, size_t(m2) * n * 4, cudaMemcpyDeviceToHost, stream_),
          "tuning download");
      cu_check(cudaStreamSynchronize(stream_), "tuning sync");
      if (std::memcmp(got.data(), ref.data(), size_t(m2) * n * 4) != 0) continue;
    }
    ++rep.bit_equal;
    const double us =
        time_us([&] { return launch(p.op, c, x16.as<uint16_t>(), m, w, n, k, y.as<float>()); });
    if (us < rep.chosen_us) {
      rep.chosen_us = us;
      rep.choice = c.text;
      p.use_lt = true;
      p.exec = c;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cu_check(cudaGetLastError(), "tuning");
  auto& slot = plans_[{n, k, bucket}];
  slot = std::move(plan);
  return *slot;
}

bool LtGemm::prefers_lt(int32_t m, const uint16_t* w, int64_t n, int64_t k) {
  const auto it = plans_.find({n, k, lt_bucket(m)});
  if (it != plans_.end()) return it->second->use_lt;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  cu_check(cudaStreamIsCapturing(stream_, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone) return false;  // no tuning inside a graph
  return tune(w, n, k, lt_bucket(m)).use_lt;
}

bool LtGemm::run(const uint16_t* x_bf16, int32_t m, const uint16_t* w, int64_t n, int64_t k,
                 float* y) {
  const auto it = plans_.find({n, k, lt_bucket(m)});
  if (it == plans_.end() || !it->second->use_lt) return false;
  return launch(it->second->op, it->second->exec, x_bf16, m, w, n, k, y) == cudaSuccess;
}

}  // namespace detllm::kernels::cuda
