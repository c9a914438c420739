// Which cuBLASLt executions reproduce the invariant GEMM's bits, and how fast are they?
// design.md Rule 1 lets kernel *selection* change with M only among kernels shown to give
// identical bits. This program enumerates cuBLASLt candidates for Llama-3.1-8B's layer shapes:
//   native  — a heuristic algorithm as returned, or with its split-K count forced to the
//             shape's split count S (gemm_split_count) under each reduction scheme;
//   chain   — S calls over the K slices of the splits, each unsplit (split-K forced to 1), the
//             first with beta 0 and the others with beta 1 (y = acc_s + y: the merge order
//             ((p0 + p1) + p2) + … of the invariant kernel);
// runs each at M = 128 … 4096, compares every output bit with the invariant kernel's result
// for the same rows, and times it against default cuBLAS (cublasGemmEx, the fast path).
// Prints every candidate (bits equal or the count of differing elements) and, per shape and M,
// the fastest bit-equal candidate's speed ratio (cuBLAS time ÷ its time; 1.0 = as fast).
// --splits N replaces every shape's split count by N (a numerics experiment: which S makes the
// best bit-equal executions fastest), on the shapes where N divides the K range.
// --exhaustive: besides the heuristics, every unsplit configuration cuBLASLt offers for the
// problem (each algorithm id × its tiles × its stages × five cluster shapes; split-K 1), each
// checked for the kernel's bits and timed; prints the fastest bit-equal ones against the best
// heuristic one, and TB/s of the weight bytes. --ms LIST picks the M values, --shapes LIST the
// shapes (qkv,o,gate_up,down,lm_head).
// Run: build-cuda/benchmarks/cuda_gemm_lt_bench [--quick] [--splits N] [--exhaustive]
//      [--ms 1,8,16] [--shapes o,qkv]   (exits without a GPU)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "core/dtype.h"
#include "gemm_bench_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_ops.h"

using namespace detllm;
namespace kc = detllm::kernels::cuda;

namespace {

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CB(x)                                                                                    \
  do {                                                                                           \
    cublasStatus_t s_ = (x);                                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cublasGetStatusString(s_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

using bench_util::fill;
using bench_util::Shape;

template <typename T>
T* dev(size_t count) {
  void* raw = nullptr;
  CK(cudaMalloc(&raw, count * sizeof(T)));
  T* p = static_cast<T*>(raw);
  CK(cudaMemset(p, 0, count * sizeof(T)));
  return p;
}

struct AlgoInfo {
  int id = 0;
  uint32_t tile = 0, splitk = 0, red = 0, swizzle = 0, custom = 0, stages = 0;
  uint16_t inner = 0, cluster = 0;
};

AlgoInfo info_of(const cublasLtMatmulAlgo_t& a) {
  AlgoInfo i;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &i.id, sizeof(i.id), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &i.tile, sizeof(i.tile),
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &i.splitk,
                                       sizeof(i.splitk), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &i.red,
                                       sizeof(i.red), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &i.swizzle,
                                       sizeof(i.swizzle), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &i.custom,
                                       sizeof(i.custom), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &i.stages,
                                       sizeof(i.stages), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &i.inner,
                                       sizeof(i.inner), &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &i.cluster,
                                       sizeof(i.cluster), &w);
  return i;
}

std::string describe(const AlgoInfo& i) {
  return fmt::format(
      "algo {} tile {} stages {} splitK {} red {} swz {} cust {} inner {} cluster {}", i.id, i.tile,
      i.stages, i.splitk, i.red, i.swizzle, i.custom, i.inner, i.cluster);
}

// One cuBLASLt problem: y (m, n) fp32 row-major = x (m, kk) bf16 · w (n, kk) bf16ᵀ, where x
// and w are column windows of width kk in matrices with leading dimension ld (= full k).
struct LtProblem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtProblem(int64_t m, int64_t n, int64_t kk, int64_t ld) {
    CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof(nn)));
    CB(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, kk, n, ld));  // W window, op T → n × kk
    CB(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, kk, m, ld));  // x window → kk × m
    CB(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, n, m, n));     // yᵀ column-major = y row-major
  }
  ~LtProblem() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(op);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
};

std::vector<cublasLtMatmulAlgo_t> heuristics(cublasLtHandle_t lt, const LtProblem& p,
                                             size_t ws_bytes, int want) {
  cublasLtMatmulPreference_t pref;
  CB(cublasLtMatmulPreferenceCreate(&pref));
  CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                          sizeof(ws_bytes)));
  std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<size_t>(want));
  int got = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.c, p.c, pref, want, r.data(), &got);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < got; ++i)
    if (r[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      out.push_back(r[static_cast<size_t>(i)].algo);
  return out;
}

// Returns false when the algorithm does not support the forced configuration.
bool force(cublasLtHandle_t lt, const LtProblem& p, cublasLtMatmulAlgo_t& algo, uint32_t splitk,
           uint32_t red, size_t ws_bytes) {
  if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                           sizeof(splitk)) != CUBLAS_STATUS_SUCCESS)
    return false;
  if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                           sizeof(red)) != CUBLAS_STATUS_SUCCESS)
    return false;
  cublasLtMatmulHeuristicResult_t res{};
  if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.c, p.c, &algo, &res) != CUBLAS_STATUS_SUCCESS)
    return false;
  return res.workspaceSize <= ws_bytes;
}

// Every unsplit configuration cuBLASLt has for the problem: each algorithm id × its tiles × its
// stages × five cluster shapes × its custom options × CTA swizzling, split-K 1, that AlgoCheck
// accepts.
std::vector<cublasLtMatmulAlgo_t> every_unsplit(cublasLtHandle_t lt, const LtProblem& p,
                                                size_t ws_bytes) {
  std::vector<int> ids(512);
  int n_ids = 0;
  CB(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                              CUDA_R_32F, CUDA_R_32F, static_cast<int>(ids.size()), ids.data(),
                              &n_ids));
  auto caps = [](const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoCapAttributes_t what) {
    size_t bytes = 0;
    std::vector<uint32_t> v;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, what, nullptr, 0, &bytes) == CUBLAS_STATUS_SUCCESS &&
        bytes >= 4) {
      v.resize(bytes / 4);
      if (cublasLtMatmulAlgoCapGetAttribute(&a, what, v.data(), bytes, &bytes) !=
          CUBLAS_STATUS_SUCCESS)
        v.clear();
    }
    if (v.empty()) v.push_back(0);  // UNDEFINED: the algorithm's own choice
    return v;
  };
  std::vector<cublasLtMatmulAlgo_t> out;
  for (int i = 0; i < n_ids; ++i) {
    cublasLtMatmulAlgo_t a0;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_32F, CUDA_R_32F, ids[size_t(i)],
                               &a0) != CUBLAS_STATUS_SUCCESS)
      continue;
    int32_t custom_max = 0, swizzle_ok = 0;
    size_t w = 0;
    cublasLtMatmulAlgoCapGetAttribute(&a0, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                      sizeof(custom_max), &w);
    cublasLtMatmulAlgoCapGetAttribute(&a0, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swizzle_ok,
                                      sizeof(swizzle_ok), &w);
    for (const uint32_t tile : caps(a0, CUBLASLT_ALGO_CAP_TILE_IDS))
      for (const uint32_t stages : caps(a0, CUBLASLT_ALGO_CAP_STAGES_IDS))
        for (const uint16_t cluster : {0, 2, 3, 4, 5})
          for (uint32_t custom = 0; custom <= uint32_t(std::clamp(custom_max, 0, 7)); ++custom)
            for (uint32_t swizzle = 0; swizzle <= (swizzle_ok ? 1u : 0u); ++swizzle) {
              cublasLtMatmulAlgo_t a = a0;
              const uint32_t one = 1, none = 0;
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                                   4);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle,
                                                   4);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                   &cluster, 2);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none,
                                                   4);
              cublasLtMatmulHeuristicResult_t res{};
              if (cublasLtMatmulAlgoCheck(lt, p.op, p.a, p.b, p.c, p.c, &a, &res) ==
                      CUBLAS_STATUS_SUCCESS &&
                  res.workspaceSize <= ws_bytes)
                out.push_back(a);
            }
  }
  return out;
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  template <typename F>
  double us(F&& call, int iters) {
    for (int i = 0; i < 3; ++i) call(i);
    CK(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) call(i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return 1000.0 * ms / iters;
  }
};

size_t count_diff(const std::vector<float>& a, const std::vector<float>& b, size_t n) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, exhaustive = false;
  int splits_override = 0;
  std::vector<int64_t> ms_arg;
  std::vector<std::string> shapes_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    if (a == "--exhaustive") exhaustive = true;
    if (a == "--splits" && i + 1 < argc) splits_override = std::atoi(argv[++i]);
    if (a == "--shapes" && i + 1 < argc) shapes_arg = bench_util::parse_names(argv[++i]);
    if (a == "--ms" && i + 1 < argc) {
      const std::vector<int> ms = bench_util::parse_counts(argv[++i]);
      if (ms.empty() || *std::max_element(ms.begin(), ms.end()) > 4096) {
        std::fprintf(stderr, "cuda_gemm_lt_bench: --ms wants M values 1..4096, comma-separated\n");
        return 2;
      }
      ms_arg.assign(ms.begin(), ms.end());
    }
  }
  if (kernels::cuda_device_count() == 0) {
    std::puts("no CUDA device: nothing to measure");
    return 0;
  }
  std::fprintf(stderr, "device: %s\n", kernels::cuda_device_description(0).c_str());
  cublasLtHandle_t lt;
  CB(cublasLtCreate(&lt));
  cublasHandle_t cb;
  CB(cublasCreate(&cb));
  const size_t ws_bytes = size_t(256) << 20;
  void* ws = dev<unsigned char>(ws_bytes);

  const std::vector<Shape> shapes = {{"qkv", 6144, 4096},
                                     {"o", 4096, 4096},
                                     {"gate_up", 28672, 4096},
                                     {"down", 4096, 14336},
                                     {"lm_head", 128256, 4096}};
  const std::vector<int64_t> ms =
      !ms_arg.empty() ? ms_arg
      : quick         ? std::vector<int64_t>{256, 4096}
                      : std::vector<int64_t>{1, 8, 32, 64, 128, 256, 512, 1024, 4096};
  std::vector<std::string> exhaustive_summary;
  const int64_t m_max = 4096;
  std::vector<std::string> summary;
  Timer timer;

  for (const Shape& s : shapes) {
    if (!shapes_arg.empty() &&
        std::find(shapes_arg.begin(), shapes_arg.end(), s.name) == shapes_arg.end())
      continue;
    if (splits_override > 0 &&
        (s.k % (int64_t{splits_override} * 256) != 0 || kc::gemm_split_count(s.n, s.k) == 1))
      continue;  // the experiment is about the split shapes
    const int S = kc::gemm_effective_splits(s.n, s.k, splits_override);
    const int64_t ks = s.k / S;
    std::fprintf(stderr, "shape %s %ld->%ld S=%d\n", s.name, s.k, s.n, S);
    std::vector<float> xf(size_t(m_max) * s.k), wf(size_t(s.n) * s.k);
    fill(xf, 11, 1.0f);
    fill(wf, 12, 1.0f / std::sqrt(static_cast<float>(s.k)));
    std::vector<uint16_t> xb(xf.size()), wb(wf.size());
    for (size_t i = 0; i < xf.size(); ++i) xb[i] = f32_to_bf16(xf[i]);
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
    float* x32 = dev<float>(xf.size());
    uint16_t* x16 = dev<uint16_t>(xb.size());
    // Copies of W rotated per call so that timings stream W from HBM, not from the L2.
    const int n_copies =
        static_cast<int>(std::max<size_t>(1, (size_t(256) << 20) / (wb.size() * 2) + 1));
    uint16_t* w_all = dev<uint16_t>(wb.size() * size_t(n_copies));
    uint16_t* w = w_all;
    auto wc = [&](int i) { return w_all + size_t(i % n_copies) * wb.size(); };
    float* y = dev<float>(size_t(m_max) * s.n);
    CK(cudaMemcpy(x32, xf.data(), xf.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x16, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    for (int c = 0; c < n_copies; ++c)
      CK(cudaMemcpy(wc(c), wb.data(), wb.size() * 2, cudaMemcpyHostToDevice));

    // The invariant kernel's result for all m_max rows: the reference bits.
    const kc::GemmScratchNeed need =
        kc::gemm_scratch_need(int32_t(m_max), s.n, s.k, -1, splits_override);
    kc::GemmScratch scratch;
    scratch.x_bf16 = need.x_bf16 ? dev<uint16_t>(need.x_bf16 / 2) : nullptr;
    scratch.partials = need.partials ? dev<float>(need.partials / 4) : nullptr;
    scratch.counters = need.counters ? dev<int32_t>(need.counters / 4) : nullptr;
    CK(kc::launch_gemm_invariant(x32, int32_t(m_max), w, s.n, s.k, nullptr, y, scratch, -1,
                                 splits_override, nullptr));
    CK(cudaDeviceSynchronize());
    std::vector<float> ref(size_t(m_max) * s.n), got(ref.size());
    CK(cudaMemcpy(ref.data(), y, ref.size() * 4, cudaMemcpyDeviceToHost));

    for (const int64_t m : ms) {
      const size_t n_out = size_t(m) * s.n;
      const int iters = m >= 1024 ? 20 : 100;
      // Default cuBLAS (bf16 x already converted: the fast path converts too).
      const float one = 1.0f, zero = 0.0f;
      const double t_cublas = timer.us(
          [&](int i) {
            CB(cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, int(s.n), int(m), int(s.k), &one, wc(i),
                            CUDA_R_16BF, int(s.k), x16, CUDA_R_16BF, int(s.k), &zero, y, CUDA_R_32F,
                            int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          },
          iters);
      const double t_ours = timer.us(
          [&](int i) {
            CK(kc::launch_gemm_invariant(x32, int32_t(m), wc(i), s.n, s.k, nullptr, y, scratch, -1,
                                         splits_override, nullptr));
          },
          iters);
      CK(cudaMemcpy(got.data(), y, n_out * 4, cudaMemcpyDeviceToHost));
      fmt::print("{} M={} cublas {:.1f} us | ours {:.1f} us ratio {:.2f} diff {}\n", s.name, m,
                 t_cublas, t_ours, t_cublas / t_ours, count_diff(got, ref, n_out));
      double best = 1e30;
      std::string best_desc = "none";

      auto try_run = [&](const std::string& kind, const AlgoInfo& info, auto&& call) {
        CK(cudaMemset(y, 0, n_out * 4));
        call(0);
        const cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
          fmt::print("  {} {} -> launch error {}\n", kind, describe(info), cudaGetErrorString(e));
          std::exit(1);
        }
        CK(cudaMemcpy(got.data(), y, n_out * 4, cudaMemcpyDeviceToHost));
        const size_t d = count_diff(got, ref, n_out);
        const double t = timer.us(call, iters);
        fmt::print("  {:<14} {:<90} {:8.1f} us ratio {:.2f} {}\n", kind, describe(info), t,
                   t_cublas / t, d == 0 ? "BITS EQUAL" : fmt::format("differ {}", d));
        if (d == 0 && t < best) {
          best = t;
          best_desc = kind + " " + describe(info);
        }
      };

      // native: the full problem.
      {
        LtProblem p(m, s.n, s.k, s.k);
        const auto algos = heuristics(lt, p, ws_bytes, quick ? 8 : 16);
        for (const auto& a0 : algos) {
          std::vector<std::pair<std::string, cublasLtMatmulAlgo_t>> variants;
          variants.push_back({"native", a0});
          for (uint32_t red : {1u, 2u, 4u}) {
            cublasLtMatmulAlgo_t a = a0;
            if (S > 1 && force(lt, p, a, uint32_t(S), red, ws_bytes))
              variants.push_back({fmt::format("native S red{}", red), a});
          }
          if (S == 1) {
            cublasLtMatmulAlgo_t a = a0;
            if (force(lt, p, a, 1, 0, ws_bytes)) variants.push_back({"native S=1", a});
          }
          for (auto& [kind, a] : variants) {
            const cublasLtMatmulAlgo_t algo = a;
            try_run(kind, info_of(algo), [&](int i) {
              CB(cublasLtMatmul(lt, p.op, &one, wc(i), p.a, x16, p.b, &zero, y, p.c, y, p.c, &algo,
                                ws, ws_bytes, nullptr));
            });
          }
        }
      }
      // chain: S unsplit calls over the K slices, merged by beta = 1.
      if (S > 1) {
        LtProblem p(m, s.n, ks, s.k);
        const auto algos = heuristics(lt, p, ws_bytes, quick ? 8 : 16);
        for (const auto& a0 : algos) {
          cublasLtMatmulAlgo_t a = a0;
          if (!force(lt, p, a, 1, 0, ws_bytes)) continue;
          const cublasLtMatmulAlgo_t algo = a;
          try_run("chain", info_of(algo), [&](int i) {
            for (int sp = 0; sp < S; ++sp) {
              const float beta = sp == 0 ? 0.0f : 1.0f;
              CB(cublasLtMatmul(lt, p.op, &one, wc(i) + sp * ks, p.a, x16 + sp * ks, p.b, &beta, y,
                                p.c, y, p.c, &algo, ws, ws_bytes, nullptr));
            }
          });
        }
      }
      if (exhaustive && S == 1) {
        const double best_heuristic = best;
        struct Timed {
          double us;
          std::string desc;
        };
        std::vector<Timed> equal;
        // Every unsplit configuration, and the heuristics' own (split-K forced to 1): run,
        // compared with the kernel's rows, timed if bit-equal.
        {
          LtProblem p(m, s.n, s.k, s.k);
          std::vector<cublasLtMatmulAlgo_t> algos = every_unsplit(lt, p, ws_bytes);
          for (cublasLtMatmulAlgo_t a : heuristics(lt, p, ws_bytes, 16))
            if (force(lt, p, a, 1, 0, ws_bytes)) algos.push_back(a);
          size_t n_equal = 0, n_differ = 0, n_fail = 0;
          for (const auto& algo : algos) {
            auto call = [&](int i) {
              return cublasLtMatmul(lt, p.op, &one, wc(i), p.a, x16, p.b, &zero, y, p.c, y, p.c,
                                    &algo, ws, ws_bytes, nullptr);
            };
            CK(cudaMemset(y, 0, n_out * 4));
            if (call(0) != CUBLAS_STATUS_SUCCESS || cudaDeviceSynchronize() != cudaSuccess) {
              ++n_fail;
              (void)cudaGetLastError();
              continue;
            }
            CK(cudaMemcpy(got.data(), y, n_out * 4, cudaMemcpyDeviceToHost));
            if (count_diff(got, ref, n_out) != 0) {
              ++n_differ;
              continue;
            }
            ++n_equal;
            const double t = timer.us([&](int i) { CB(call(i)); }, 20);
            equal.push_back({t, describe(info_of(algo))});
          }
          fmt::print("  exhaustive: {} configurations, {} bit-equal, {} differ, {} failed\n",
                     algos.size(), n_equal, n_differ, n_fail);
        }
        std::sort(equal.begin(), equal.end(),
                  [](const Timed& a, const Timed& b) { return a.us < b.us; });
        const double tbs = [&](double us) {
          return us > 0 ? double(s.n) * double(s.k) * 2.0 / (us * 1e-6) / 1e12 : 0.0;
        }(equal.empty() ? 0.0 : equal[0].us);
        for (size_t i = 0; i < std::min<size_t>(equal.size(), 8); ++i)
          fmt::print("    {:8.1f} us  {}\n", equal[i].us, equal[i].desc);
        exhaustive_summary.push_back(fmt::format(
            "| {} | {} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {} |", s.name, m, best_heuristic,
            equal.empty() ? 0.0 : equal[0].us, equal.empty() ? 0.0 : best_heuristic / equal[0].us,
            tbs, equal.empty() ? "none" : equal[0].desc));
      }
      summary.push_back(fmt::format("| {} | {} | {:.1f} | {:.2f} | {:.2f} | {} |", s.name, m,
                                    t_cublas, t_cublas / t_ours,
                                    best < 1e29 ? t_cublas / best : 0.0, best_desc));
    }
    cudaFree(x32);
    cudaFree(x16);
    cudaFree(w_all);
    cudaFree(y);
    cudaFree(scratch.x_bf16);
    cudaFree(scratch.partials);
    cudaFree(scratch.counters);
  }
  fmt::print(
      "\n| shape | M | cuBLAS µs | ours ratio | best bit-equal Lt ratio | candidate |\n"
      "|---|---|---|---|---|---|\n");
  for (const auto& l : summary) fmt::print("{}\n", l);
  if (exhaustive) {
    fmt::print(
        "\n| shape | M | best heuristic bit-equal µs | best exhaustive bit-equal µs | speed-up | "
        "weights TB/s | configuration |\n|---|---|---|---|---|---|---|\n");
    for (const auto& l : exhaustive_summary) fmt::print("{}\n", l);
  }
  cublasLtDestroy(lt);
  cublasDestroy(cb);
  return 0;
}
