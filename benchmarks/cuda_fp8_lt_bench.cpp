// Which cuBLASLt FP8 executions give the invariant FP8 GEMM's bits — the question the verified
// plans of the bf16 GEMM answer for bf16 (kernels/cuda/gemm_lt.h), asked of FP8 before a
// planner is built on it. On Llama-3.1-8B's four projection shapes at each M of the run: the
// invariant GEMM (launch_fp8_gemm_wg_split with the shape's own split S, the served rule)
// against every algorithm cuBLASLt's heuristic offers for the unscaled FP8 TN matmul, each run
// as S calls over the rule's k runs chained through beta = 1 (D = acc_z + D: the rule's
// "runs added in ascending order"), then launch_fp8_scale_outer (· x_scale · w_scale, the
// rule's epilogue). Each candidate's output is compared bit for bit with the kernel's; the
// bit-equal ones are timed. Data: E4M3 codes over the whole range (2^-9 … 448) and scales
// that vary by row and column, so sums of different orders round differently — the control
// column says whether this data tells the split rule's bits from the unsplit kernel's.
// Columns: kernel µs; candidates (algorithms accepted for every run's layout); bit-equal;
// the fastest bit-equal µs and kernel ÷ it; the fastest candidate of any bits (what cuBLASLt
// reaches on its own order) and kernel ÷ it; control (split ≠ unsplit on this data: the
// comparison can fail).
// Run: build-cuda/benchmarks/cuda_fp8_lt_bench [--ms LIST] (exits with a message without a GPU)
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_args.h"
#include "ops_bench_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/fp8_launch.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  fmt::print(stderr, "cuda_fp8_lt_bench: {}: {}\n", what, cudaGetErrorString(err));
  std::exit(1);
}
void check(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  fmt::print(stderr, "cuda_fp8_lt_bench: {}: {}\n", what, cublasGetStatusString(st));
  std::exit(1);
}

struct Dev {
  void* p = nullptr;
  explicit Dev(size_t n) { check(cudaMalloc(&p, std::max<size_t>(n, 1)), "cudaMalloc"); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

uint64_t next(uint64_t& x) {
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

// E4M3 codes of every magnitude, no NaN code (S.1111.111).
std::vector<uint8_t> codes(size_t n, uint64_t seed) {
  std::vector<uint8_t> h(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& c : h) {
    c = static_cast<uint8_t>(next(x) >> 56);
    if ((c & 0x7fu) == 0x7fu) c ^= 1u;
  }
  return h;
}

std::vector<float> scales(size_t n, uint64_t seed) {
  std::vector<float> h(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& s : h) s = 1e-3f * (1.0f + static_cast<float>(next(x) >> 40) / float(1 << 24));
  return h;
}

template <class F>
double time_us(cudaStream_t stream, F&& call) {
  for (int i = 0; i < 2; ++i) check(call(), "warm-up");
  check(cudaStreamSynchronize(stream), "sync");
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    const double t0 = bench_util::seconds();
    for (int i = 0; i < 5; ++i) check(call(), "timed call");
    check(cudaStreamSynchronize(stream), "sync");
    reps.push_back((bench_util::seconds() - t0) / 5 * 1e6);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

struct Shape {
  const char* name;
  int64_t n, k;
};

// The unscaled FP8 TN matmul of one k run: D (n × m, ld n) = op(A)ᵀ·B, A = w's kz columns from
// k0 (ld k), B = xq's (ld k); y (m, n) row-major is D.
struct RunLayouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  RunLayouts(int64_t kz, int64_t k, int64_t n, int32_t m) {
    check(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, kz, n, k), "layout A");
    check(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, kz, m, k), "layout B");
    check(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, n, m, n), "layout D");
  }
  ~RunLayouts() {
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
  }
  RunLayouts(const RunLayouts&) = delete;
  RunLayouts& operator=(const RunLayouts&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ms = {128, 512, 2048, 4096};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      ms = bench_util::parse_counts(argv[++i]);
      if (ms.empty()) {
        fmt::print(stderr, "cuda_fp8_lt_bench: --ms wants M values, comma-separated\n");
        return 2;
      }
    } else {
      fmt::print(stderr, "usage: cuda_fp8_lt_bench [--ms LIST]\n");
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_fp8_lt_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  fmt::print("device: {}\n", cuda_device_description(0));
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cublasLtHandle_t lt;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  const size_t ws_bytes = size_t{32} << 20;
  Dev ws(ws_bytes);
  cublasLtMatmulDesc_t desc;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast_accum = 0;
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TA");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TB");
  check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                       sizeof(fast_accum)),
        "fast accumulation off");
  cublasLtMatmulPreference_t pref;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &ws_bytes, sizeof(ws_bytes)),
        "workspace");
  Dev differ(4);

  const std::vector<Shape> shapes = {{"qkv 4096->6144", 6144, 4096},
                                     {"o 4096->4096", 4096, 4096},
                                     {"gate_up 4096->28672", 28672, 4096},
                                     {"down 14336->4096", 4096, 14336}};
  std::string table =
      "| shape (K->N) | M | S (runs) | kernel µs | candidates | bit-equal | fastest equal µs | "
      "kernel ÷ it | fastest any µs | kernel ÷ it | control |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Shape& s : shapes) {
    const int splits = cuda::fp8_gemm_wg_auto_splits(s.n, s.k, prop.multiProcessorCount);
    const int32_t runs = cuda::fp8_gemm_wg_split_runs(s.k, splits);
    const int64_t tiles = (s.k + 127) / 128, per = (tiles + runs - 1) / runs;
    const std::vector<uint8_t> wh = codes(size_t(s.n) * s.k, 11 + s.n);
    const std::vector<float> wsh = scales(size_t(s.n), 13 + s.k);
    Dev w(wh.size()), w_scale(wsh.size() * 4);
    check(cudaMemcpy(w.p, wh.data(), wh.size(), cudaMemcpyHostToDevice), "upload w");
    check(cudaMemcpy(w_scale.p, wsh.data(), wsh.size() * 4, cudaMemcpyHostToDevice), "upload");
    for (int m : ms) {
      const std::vector<uint8_t> xh = codes(size_t(m) * s.k, 17 + m);
      const std::vector<float> xsh = scales(size_t(m), 19 + m);
      Dev xq(xh.size()), x_scale(xsh.size() * 4), y_ref(size_t(m) * s.n * 4),
          y_unsplit(size_t(m) * s.n * 4), y(size_t(m) * s.n * 4);
      check(cudaMemcpy(xq.p, xh.data(), xh.size(), cudaMemcpyHostToDevice), "upload x");
      check(cudaMemcpy(x_scale.p, xsh.data(), xsh.size() * 4, cudaMemcpyHostToDevice), "upload");
      auto kernel = [&](float* out, int sp) {
        return cuda::launch_fp8_gemm_wg_split(xq.as<uint8_t>(), x_scale.as<float>(), m,
                                              w.as<uint8_t>(), w_scale.as<float>(), s.n, s.k,
                                              nullptr, out, sp, nullptr, 0, -1, stream);
      };
      check(kernel(y_ref.as<float>(), splits), "the invariant GEMM");
      check(kernel(y_unsplit.as<float>(), 1), "the unsplit GEMM");
      const auto differs = [&](const float* a, const float* b) {
        check(cuda::launch_any_word_differs(a, b, int64_t{m} * s.n, differ.as<uint32_t>(),
                                            stream),
              "compare");
        uint32_t d = 0;
        check(cudaMemcpyAsync(&d, differ.p, 4, cudaMemcpyDeviceToHost, stream), "download");
        check(cudaStreamSynchronize(stream), "sync");
        return d != 0;
      };
      const bool control = splits > 1 ? differs(y_ref.as<float>(), y_unsplit.as<float>()) : true;
      const double t_kernel = time_us(stream, [&] { return kernel(y.as<float>(), splits); });

      // The runs' layouts: every run but the last has per tiles; the last may have fewer.
      const int64_t k_full = std::min<int64_t>(per * 128, s.k);
      const int64_t k_last = s.k - (runs - 1) * per * 128;
      RunLayouts full(k_full, s.k, s.n, m), last(k_last, s.k, s.n, m);
      constexpr int kAsk = 32;
      cublasLtMatmulHeuristicResult_t found[kAsk];
      int n_found = 0;
      check(cublasLtMatmulAlgoGetHeuristic(lt, desc, full.a, full.b, full.d, full.d, pref, kAsk,
                                           found, &n_found),
            "heuristic");
      int candidates = 0, equal = 0;
      double best_equal = 0, best_any = 0;
      for (int c = 0; c < n_found; ++c) {
        const cublasLtMatmulAlgo_t& algo = found[c].algo;
        cublasLtMatmulHeuristicResult_t r{};
        if (runs > 1 && cublasLtMatmulAlgoCheck(lt, desc, last.a, last.b, last.d, last.d, &algo,
                                                &r) != CUBLAS_STATUS_SUCCESS)
          continue;
        auto chain = [&]() -> cudaError_t {
          const float one = 1.0f;
          for (int32_t z = 0; z < runs; ++z) {
            const RunLayouts& l = z + 1 < runs ? full : last;
            const float beta = z == 0 ? 0.0f : 1.0f;
            const int64_t k0 = int64_t{z} * per * 128;
            const cublasStatus_t st =
                cublasLtMatmul(lt, desc, &one, w.as<uint8_t>() + k0, l.a, xq.as<uint8_t>() + k0,
                               l.b, &beta, y.p, l.d, y.p, l.d, &algo, ws.p, ws_bytes, stream);
            if (st != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
          }
          return cuda::launch_fp8_scale_outer(y.as<float>(), x_scale.as<float>(),
                                              w_scale.as<float>(), m, s.n, stream);
        };
        if (chain() != cudaSuccess) continue;
        ++candidates;
        const bool same = !differs(y.as<float>(), y_ref.as<float>());
        const double t = time_us(stream, chain);
        if (best_any == 0 || t < best_any) best_any = t;
        if (same) {
          ++equal;
          if (best_equal == 0 || t < best_equal) best_equal = t;
        }
      }
      const auto us = [](double t) { return t > 0 ? fmt::format("{:.1f}", t) : std::string("—"); };
      const auto ratio = [&](double t) {
        return t > 0 ? fmt::format("{:.2f}", t_kernel / t) : std::string("—");
      };
      const std::string row = fmt::format(
          "| {} | {} | {} ({}) | {:.1f} | {} | {} | {} | {} | {} | {} | {} |\n", s.name, m, splits,
          runs, t_kernel, candidates, equal, us(best_equal), ratio(best_equal), us(best_any),
          ratio(best_any), splits > 1 ? (control ? "differs" : "SAME: data too tame") : "S = 1");
      fmt::print("{}", row);
      std::fflush(stdout);
      table += row;
    }
  }
  fmt::print("\n{}", table);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(lt);
  check(cudaStreamDestroy(stream), "stream");
  return 0;
}
