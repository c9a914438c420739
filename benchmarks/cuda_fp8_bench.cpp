// FP8 GEMM (kernels/cuda/fp8_gemm.cu) against the bf16 invariant GEMM on Llama-3.1-8B's layer
// shapes at M = 1, 8, 64, 256, 2048, 4096, from one run on one GPU. Columns:
//   bf16 engine  — Ops::matmul_rounded in invariant mode (bf16 x): the engine's GEMM, i.e. the
//                  invariant kernel or a cuBLASLt plan verified to give its bits (gemm_lt.h);
//   bf16 kernel  — launch_gemm_invariant_bf16, the invariant kernel alone;
//   fp8 gemm     — launch_fp8_gemm on quantized rows, the plan's default tile;
//   fp8 linear   — launch_fp8_linear: the per-row quantizer from bf16 x, then the GEMM (what a
//                  layer would run in place of the bf16 GEMM);
//   fp8 best     — the fastest of the six FP8 tile configurations (all give the same bits);
//   wgmma gemm   — launch_fp8_gemm_wg (fp8_gemm_wg.cuh, the FP8 warpgroup-MMA kernel, other
//                  bits than the mma.sync one), the plan's default tile;
//   wgmma linear — launch_fp8_linear_wg: the quantizer from bf16 x, then the wgmma GEMM;
//   wgmma best   — the fastest of its tile configurations (all give the same bits);
//   lt fp8       — cuBLASLt's FP8 matmul with outer-vector scales (fp8_gemm_lt.h): the fast
//                  path of non-deterministic requests ("—" where this cuBLASLt has none);
//   inv ÷ fast   — lt fp8 time ÷ wgmma gemm time (≥ 1: the invariant kernel is no slower).
// Ratios are bf16 time ÷ FP8 time (> 1: FP8 faster); TFLOP/s is the wgmma GEMM's 2·M·N·K / t. Weights rotate over copies that exceed
// the L2 (≈ 256 MiB of each kind), as in cuda_gemm_bench.
// With --wg-splits LIST a second table times launch_fp8_gemm_wg_split (fp8_gemm_wg_split.cuh:
// the wgmma GEMM with k cut in S runs, a numerics of its own per S) at each M ≤ 256 of the run
// for each S: µs (for M ≤ 64 the runs folded in the kernel, and beside it folded by a second,
// combining launch), bf16 engine ÷ split, and the weights' GB/s; --only-splits skips the other
// kernels (the bf16 engine and the unsplit wgmma GEMM are still timed, for the ratios).
// A third table, at each M > 64 of the run: the served model's prefill GEMM — the split
// launcher with each shape's own S (fp8_gemm_wg_auto_splits) — on its cp.async 128-row tiles
// (variant 2, the default) and on the TMA-fed warp-specialised kernel (variant 4,
// fp8_gemm_wg_ws.cuh): µs, TFLOP/s, their ratio, and whether their outputs are the same bits.
// Run: build-cuda/benchmarks/cuda_fp8_bench [--quick] [--ms LIST] [--wg-splits LIST [--only-splits]]
//      (exits with a message without a GPU)
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gemm_bench_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_lt.h"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "ops_bench_util.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

using bench_util::fill;
using bench_util::Shape;

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  fmt::print(stderr, "cuda_fp8_bench: {}: {}\n", what, cudaGetErrorString(err));
  std::exit(1);
}

struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t n) { check(cudaMalloc(&p, std::max<size_t>(n, 1)), "cudaMalloc"); }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median over 5 repetitions of the mean time of back-to-back calls on `stream` (µs).
template <class F>
double time_us(cudaStream_t stream, F&& call) {
  for (int i = 0; i < 3; ++i) check(call(i), "launch");
  check(cudaStreamSynchronize(stream), "sync");
  const double t0 = bench_util::seconds();
  check(call(0), "launch");
  check(cudaStreamSynchronize(stream), "sync");
  const double one = bench_util::seconds() - t0;
  const int iters = static_cast<int>(std::clamp(0.02 / std::max(one, 1e-6), 5.0, 2000.0));
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    const double s = bench_util::seconds();
    for (int i = 0; i < iters; ++i) check(call(i), "launch");
    check(cudaStreamSynchronize(stream), "sync");
    reps.push_back((bench_util::seconds() - s) / iters * 1e6);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

// FP8 weight copies of `s`: random E4M3 codes (no NaN code) and per-channel scales.
struct Fp8Copies {
  std::vector<std::unique_ptr<DeviceBytes>> codes;
  std::unique_ptr<DeviceBytes> scales;
};
Fp8Copies fp8_copies(const Shape& s, uint64_t seed) {
  const size_t bytes = size_t(s.n) * s.k;
  const int n_copies = static_cast<int>(std::max<size_t>(1, (size_t(256) << 20) / bytes + 1));
  std::vector<uint8_t> h(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& c : h) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<uint8_t>(x >> 56) & 0xbfu;  // |value| ≤ 2 (exponent field < 8): no NaN
  }
  Fp8Copies out;
  for (int c = 0; c < n_copies; ++c) {
    out.codes.push_back(std::make_unique<DeviceBytes>(bytes));
    check(cudaMemcpy(out.codes.back()->p, h.data(), bytes, cudaMemcpyHostToDevice), "upload");
  }
  std::vector<float> sc(size_t(s.n), 1.0f / 64.0f);
  out.scales = std::make_unique<DeviceBytes>(sc.size() * 4);
  check(cudaMemcpy(out.scales->p, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice), "upload");
  return out;
}

}  // namespace

// "1,2,4" → {1, 2, 4}; false on anything else or a value outside [lo, hi].
bool parse_list(const char* p, int lo, int hi, std::vector<int>& out) {
  out.clear();
  while (*p) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v < lo || v > hi) return false;
    out.push_back(static_cast<int>(v));
    p = *end == ',' ? end + 1 : end;
  }
  return !out.empty();
}

int main(int argc, char** argv) {
  bool quick = false, only_splits = false;
  std::vector<int> ms = {1, 8, 64, 256, 2048, 4096}, splits;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    only_splits = only_splits || std::strcmp(argv[i], "--only-splits") == 0;
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc && !parse_list(argv[++i], 1, 8192, ms)) {
      fmt::print(stderr, "cuda_fp8_bench: --ms wants M values 1..8192, comma-separated\n");
      return 2;
    }
    if (std::strcmp(argv[i], "--wg-splits") == 0 && i + 1 < argc &&
        !parse_list(argv[++i], 1, 64, splits)) {
      fmt::print(stderr, "cuda_fp8_bench: --wg-splits wants split counts 1..64, comma-separated\n");
      return 2;
    }
  }
  if (only_splits && splits.empty()) {
    fmt::print(stderr, "cuda_fp8_bench: --only-splits needs --wg-splits LIST\n");
    return 2;
  }
  if (quick) ms = {1, 64, 2048};
  if (cuda_device_count() == 0) {
    fmt::print("cuda_fp8_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  fmt::print("device: {}\n", cuda_device_description(0));
  auto inv = make_cuda_ops({0, NumericsMode::kInvariant});
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cuda::Fp8LtGemm lt;

  const std::vector<Shape> shapes = {{"qkv 4096->6144", 6144, 4096},
                                     {"o 4096->4096", 4096, 4096},
                                     {"gate_up 4096->28672", 28672, 4096},
                                     {"down 14336->4096", 4096, 14336}};
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const int64_t max_k = 14336;
  // Activations: bf16 x (both paths read bf16), its FP8 rows and scales.
  Buffer x(*inv, size_t(max_m) * max_k * 2);
  {
    std::vector<float> f(size_t(max_m) * max_k);
    fill(f, 1, 1.0f);
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
    inv->upload(x.data(), h.data(), h.size() * 2);
    inv->synchronize();
  }
  DeviceBytes xq(size_t(max_m) * max_k), xs(size_t(max_m) * 4);
  // The split kernel's run chains where its runs get CTAs of their own: the largest S, m and n.
  const int max_split = splits.empty() ? 1 : *std::max_element(splits.begin(), splits.end());
  int64_t max_n = 0;
  for (const Shape& s : shapes) max_n = std::max(max_n, s.n);
  const size_t ws_floats = size_t(max_split) * cuda::kFp8GemmWgSplitCtaMaxM * size_t(max_n);
  DeviceBytes split_ws(splits.empty() ? 4 : ws_floats * 4);
  // The in-kernel fold's tile counts (zeros; each launch leaves them zero).
  const size_t tile_words = cuda::fp8_gemm_wg_split_tiles(cuda::kFp8GemmWgSplitCtaMaxM, max_n);
  DeviceBytes split_tiles(tile_words * 4);
  check(cudaMemset(split_tiles.p, 0, tile_words * 4), "cudaMemset (tile counts)");
  std::string split_table =
      "| shape (K->N) | M | S (runs) | bf16 engine µs | wgmma gemm µs (unsplit) | split µs | "
      "split, combining launch µs | engine ÷ split | unsplit ÷ split | FP8 weights GB/s "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n";

  std::string prefill_table =
      "| shape (K->N) | M | S | cp.async tiles µs (v2) | TFLOP/s | TMA warp-specialised µs (v4) "
      "| TFLOP/s | v2 ÷ v4 | same bits |\n|---|---|---|---|---|---|---|---|---|\n";
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "SM count");
  std::string table =
      "| shape (K->N) | M | bf16 engine µs | bf16 kernel µs | fp8 gemm µs | fp8 linear µs | fp8 "
      "best µs (variant) | wgmma gemm µs | wgmma linear µs | wgmma best µs (variant) | engine ÷ "
      "fp8 linear | engine ÷ wgmma linear | kernel ÷ wgmma gemm | wgmma TFLOP/s | lt fp8 µs | "
      "fast ÷ inv | fp8 GB/s (weights) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Shape& s : shapes) {
    const std::vector<Buffer> wb = bench_util::weight_copies(*inv, s, 2);
    const int nb = static_cast<int>(wb.size());
    const Fp8Copies w8 = fp8_copies(s, 3);
    const int n8 = static_cast<int>(w8.codes.size());
    Buffer y(*inv, size_t(max_m) * s.n * 4);
    inv->synchronize();
    for (int m : ms) {
      const double t_engine = bench_util::time_us(*inv, [&](int i) {
        const WeightMatrix w{wb[i % nb].data(), DType::kBF16, s.n, s.k};
        inv->matmul_rounded(x.data(), m, w, nullptr, y.f32(), s.n);
      });
      const double t_kernel = time_us(stream, [&](int i) {
        return cuda::launch_gemm_invariant_bf16(x.data<uint16_t>(), m, wb[i % nb].data<uint16_t>(),
                                                s.n, s.k, nullptr, y.f32(), cuda::GemmScratch{},
                                                -1, 0, stream);
      });
      check(cuda::launch_fp8_quantize_rows(x.data(), true, m, s.k, xq.as<uint8_t>(), xs.as<float>(),
                                           stream),
            "quantize");
      auto fp8_gemm = [&](int variant, bool wg = false) {
        const auto launch = wg ? cuda::launch_fp8_gemm_wg : cuda::launch_fp8_gemm;
        return time_us(stream, [&](int i) {
          return launch(xq.as<uint8_t>(), xs.as<float>(), m, w8.codes[i % n8]->as<uint8_t>(),
                        w8.scales->as<float>(), s.n, s.k, nullptr, y.f32(), variant, stream);
        });
      };
      if (!splits.empty() && m <= 256) {
        const double t_unsplit = fp8_gemm(-1, true);
        for (int sp : splits) {
          auto split = [&](int variant) {  // -1: the in-kernel fold where m ≤ 64
            return time_us(stream, [&](int i) {
              return cuda::launch_fp8_gemm_wg_split(
                  xq.as<uint8_t>(), xs.as<float>(), m, w8.codes[i % n8]->as<uint8_t>(),
                  w8.scales->as<float>(), s.n, s.k, nullptr, y.f32(), sp, split_ws.as<float>(),
                  ws_floats, variant, stream, split_tiles.as<unsigned>());
            });
          };
          const double t = split(-1);
          const bool small = m <= cuda::kFp8GemmWgSplitCtaMaxM;
          const std::string combining = small ? fmt::format("{:.1f}", split(3)) : "—";
          const std::string row = fmt::format(
              "| {} | {} | {} ({}) | {:.1f} | {:.1f} | {:.1f} | {} | {:.2f} | {:.2f} | {:.0f} |\n",
              s.name, m, sp, cuda::fp8_gemm_wg_split_runs(s.k, sp), t_engine, t_unsplit, t,
              combining, t_engine / t, t_unsplit / t, double(s.n) * s.k / t * 1e-3);
          fmt::print("{}", row);
          std::fflush(stdout);
          split_table += row;
        }
      }
      if (m > cuda::kFp8GemmWgSplitCtaMaxM) {
        const int sp = cuda::fp8_gemm_wg_auto_splits(s.n, s.k, sms);
        Buffer y4(*inv, size_t(m) * s.n * 4);
        auto launch = [&](int variant, int copy, float* out) {
          return cuda::launch_fp8_gemm_wg_split(
              xq.as<uint8_t>(), xs.as<float>(), m, w8.codes[copy % n8]->as<uint8_t>(),
              w8.scales->as<float>(), s.n, s.k, nullptr, out, sp, nullptr, 0, variant, stream);
        };
        auto prefill = [&](int variant, float* out) {
          return time_us(stream, [&](int i) { return launch(variant, i, out); });
        };
        const double t2 = prefill(2, y.f32()), t4 = prefill(4, y4.f32());
        check(launch(2, 0, y.f32()), "fp8 prefill gemm (v2)");
        check(launch(4, 0, y4.f32()), "fp8 prefill gemm (v4)");
        std::vector<float> a(size_t(m) * s.n), b(a.size());
        check(cudaMemcpy(a.data(), y.f32(), a.size() * 4, cudaMemcpyDeviceToHost), "copy");
        check(cudaMemcpy(b.data(), y4.f32(), b.size() * 4, cudaMemcpyDeviceToHost), "copy");
        const bool same = std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
        const double flops = 2.0 * m * double(s.n) * s.k;
        const std::string row = fmt::format(
            "| {} | {} | {} | {:.1f} | {:.0f} | {:.1f} | {:.0f} | {:.2f} | {} |\n", s.name, m, sp,
            t2, flops / t2 * 1e-6, t4, flops / t4 * 1e-6, t2 / t4, same ? "yes" : "NO");
        fmt::print("{}", row);
        std::fflush(stdout);
        prefill_table += row;
      }
      if (only_splits) continue;
      const double t_fp8 = fp8_gemm(-1);
      const double t_linear = time_us(stream, [&](int i) {
        return cuda::launch_fp8_linear(x.data(), true, m, w8.codes[i % n8]->as<uint8_t>(),
                                       w8.scales->as<float>(), s.n, s.k, nullptr, y.f32(),
                                       xq.as<uint8_t>(), xs.as<float>(), -1, stream);
      });
      double best = 1e30;
      int best_v = -1;
      for (int v = 0; v < cuda::kFp8GemmVariants; ++v) {
        const double t = fp8_gemm(v);
        if (t < best) {
          best = t;
          best_v = v;
        }
      }
      const double t_wg = fp8_gemm(-1, true);
      const double t_wg_linear = time_us(stream, [&](int i) {
        return cuda::launch_fp8_linear_wg(x.data(), true, m, w8.codes[i % n8]->as<uint8_t>(),
                                          w8.scales->as<float>(), s.n, s.k, nullptr, y.f32(),
                                          xq.as<uint8_t>(), xs.as<float>(), -1, stream);
      });
      double wg_best = 1e30;
      int wg_best_v = -1;
      for (int v = 0; v < cuda::kFp8GemmWgVariants; ++v) {
        const double t = fp8_gemm(v, true);
        if (t < wg_best) {
          wg_best = t;
          wg_best_v = v;
        }
      }
      std::string lt_us = "—", lt_ratio = "—";
      const auto lt_run = [&](int i) {
        return lt.run(xq.as<uint8_t>(), xs.as<float>(), m, w8.codes[i % n8]->as<uint8_t>(),
                      w8.scales->as<float>(), s.n, s.k, y.f32(), stream);
      };
      if (const cublasStatus_t st = lt_run(0); st == CUBLAS_STATUS_SUCCESS) {
        const double t_lt = time_us(stream, [&](int i) {
          return lt_run(i) == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
        });
        lt_us = fmt::format("{:.1f}", t_lt);
        lt_ratio = fmt::format("{:.2f}", t_lt / t_wg);
      } else {
        fmt::print(stderr, "cuBLASLt FP8 at M {} {}: {}\n", m, s.name, cublasGetStatusString(st));
      }
      const std::string row = fmt::format(
          "| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} (v{}) | {:.1f} | {:.1f} | {:.1f} "
          "(v{}) | {:.2f} | {:.2f} | {:.2f} | {:.0f} | {} | {} | {:.0f} |\n",
          s.name, m, t_engine, t_kernel, t_fp8, t_linear, best, best_v, t_wg, t_wg_linear,
          wg_best, wg_best_v, t_engine / t_linear, t_engine / t_wg_linear, t_kernel / t_wg,
          2.0 * m * double(s.n) * s.k / t_wg * 1e-6, lt_us, lt_ratio,
          double(s.n) * s.k / t_fp8 * 1e-3);
      fmt::print("{}", row);
      std::fflush(stdout);
      table += row;
    }
  }
  if (!only_splits) fmt::print("\n{}", table);
  if (!splits.empty()) fmt::print("\n{}", split_table);
  if (max_m > cuda::kFp8GemmWgSplitCtaMaxM) fmt::print("\n{}", prefill_table);
  check(cudaStreamDestroy(stream), "stream");
  return 0;
}
