// Invariant GEMM vs default cuBLAS (the fast path) on Llama-3.1-8B's layer shapes at M = 1 … 4096:
// time, TFLOP/s, GB/s (weights + x + y, each once) and the speed ratio cuBLAS time ÷ ours
// (design.md's convention: 1.0 = as fast, > 1 = faster). Both go through the same Ops::matmul
// (fp32 x in, fp32 y out, bf16 weights), weights rotated over copies that exceed the L2.
// "ours" is the invariant GEMM as the engine runs it: per (shape, M bucket) the invariant
// kernel or a cuBLASLt execution verified at startup to give the kernel's every bit, whichever
// is faster (src/kernels/cuda/gemm_lt.h); "kernel" is the invariant kernel alone. The plans
// chosen are printed at the end. With --sweep it also times the four tile variants of each size
// class (all bit-identical; tests/cuda checks) and the split-count experiment.
// --ms 129,300,700: those M instead (row counts between the plans' power-of-two buckets, as
// the engine's mixed steps run them).
// Run: build-cuda/benchmarks/cuda_gemm_bench [--quick] [--sweep] [--ms LIST]   (exits with a message without a GPU)
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gemm_bench_util.h"
#include "ops_bench_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

using bench_util::fill;
using bench_util::Shape;
using bench_util::time_us;
using bench_util::weight_copies;

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, sweep_variants = false;
  std::vector<int> given_ms;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    sweep_variants = sweep_variants || std::strcmp(argv[i], "--sweep") == 0;
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      for (const char* p = argv[++i]; *p;) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > 8192) {
          fmt::print(stderr, "cuda_gemm_bench: --ms wants M values 1..8192, comma-separated\n");
          return 2;
        }
        given_ms.push_back(static_cast<int>(v));
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_gemm_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  fmt::print("device: {}\n", cuda_device_description(0));
  auto inv = make_cuda_ops({0, NumericsMode::kInvariant});
  auto fast = make_cuda_ops({0, NumericsMode::kFast});
  CudaOptions kernel_options;
  kernel_options.gemm_lt = false;
  auto kernel = make_cuda_ops(kernel_options);
  std::vector<std::unique_ptr<Ops>> variants;
  for (int v = 0; v < 4 && sweep_variants; ++v) {
    CudaOptions o;
    o.gemm_variant = v;
    variants.push_back(make_cuda_ops(o));
  }
  const std::vector<Shape> shapes = {{"qkv 4096->6144", 6144, 4096},
                                     {"o 4096->4096", 4096, 4096},
                                     {"gate_up 4096->28672", 28672, 4096},
                                     {"down 14336->4096", 4096, 14336},
                                     {"lm_head 4096->128256", 128256, 4096}};
  std::vector<int> ms = {1, 8, 32, 64, 128, 256, 512, 1024, 4096};
  if (quick) ms = {1, 64, 1024};
  if (!given_ms.empty()) ms = given_ms;
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const int64_t max_k = 14336;

  Buffer x(*inv, size_t(max_m) * max_k * 4);
  {
    std::vector<float> h(size_t(max_m) * max_k);
    fill(h, 1, 1.0f);
    inv->upload(x.data(), h.data(), h.size() * 4);
  }
  std::string sweep =
      "| shape (K->N) | M | v0 µs | v1 µs | v2 µs | v3 µs | default µs | cuBLAS µs "
      "|\n|---|---|---|---|---|---|---|---|\n";
  std::string table =
      "| shape (K->N) | M | ours µs | kernel µs | cuBLAS µs | ours TFLOP/s | cuBLAS TFLOP/s | ours "
      "GB/s | cuBLAS GB/s | speed ratio (cuBLAS t / ours t) "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Shape& s : shapes) {
    const size_t w_bytes = size_t(s.n) * s.k * 2;
    const std::vector<Buffer> ws = weight_copies(*inv, s, 2);
    const int n_copies = static_cast<int>(ws.size());
    Buffer y(*inv, size_t(max_m) * s.n * 4);
    inv->synchronize();
    for (int m : ms) {
      auto run = [&](Ops& ops) {
        return time_us(ops, [&](int i) {
          const WeightMatrix w{ws[i % n_copies].data(), DType::kBF16, s.n, s.k};
          ops.matmul(x.f32(), m, w, nullptr, y.f32());
        });
      };
      const double t_ours = run(*inv);
      const double t_cub = run(*fast);
      const double t_kernel = run(*kernel);
      double t_v[4] = {0, 0, 0, 0};
      for (int v = 0; v < 4 && sweep_variants; ++v) t_v[v] = run(*variants[v]);
      sweep += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n",
                           s.name, m, t_v[0], t_v[1], t_v[2], t_v[3], t_ours, t_cub);
      const double flop = 2.0 * m * s.n * s.k;
      const double bytes = double(w_bytes) + 4.0 * m * s.k + 4.0 * m * s.n;
      const std::string row = fmt::format(
          "| {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.0f} | {:.0f} | {:.2f} |\n",
          s.name, m, t_ours, t_kernel, t_cub, flop / t_ours * 1e-6, flop / t_cub * 1e-6,
          bytes / t_ours * 1e-3, bytes / t_cub * 1e-3, t_cub / t_ours);
      fmt::print("{}", row);
      std::fflush(stdout);
      table += row;
    }
  }
  // Design experiment (design.md section 6, (a) vs (b)): the same shapes with no K split at all
  // (S = 1: narrow tiles must fill the GPU alone) against the shape's fixed split count.
  // S = 1 changes the numerics, so this is a measurement, not a mode.
  std::string splits_table =
      "| shape (K->N) | M | S | best µs (variant) | S=1 best µs (variant) "
      "|\n|---|---|---|---|---|\n";
  for (const Shape& s : {shapes[0], shapes[1], shapes[3]}) {
    if (!sweep_variants) break;
    const std::vector<Buffer> ws = weight_copies(*inv, s, 3);
    const int n_copies = static_cast<int>(ws.size());
    Buffer y(*inv, size_t(max_m) * s.n * 4);
    inv->synchronize();
    for (int m : {1, 8, 64, 256, 1024}) {
      if (m > max_m) continue;
      double best[2] = {1e30, 1e30};
      int best_v[2] = {0, 0};
      for (int one = 0; one < 2; ++one) {
        for (int v = 0; v < 4; ++v) {
          CudaOptions o;
          o.gemm_variant = v;
          o.gemm_splits_override = one ? 1 : 0;
          auto ops = make_cuda_ops(o);
          const double t = time_us(*ops, [&](int i) {
            const WeightMatrix w{ws[i % n_copies].data(), DType::kBF16, s.n, s.k};
            ops->matmul(x.f32(), m, w, nullptr, y.f32());
          });
          if (t < best[one]) {
            best[one] = t;
            best_v[one] = v;
          }
        }
      }
      splits_table +=
          fmt::format("| {} | {} | {} | {:.1f} (v{}) | {:.1f} (v{}) |\n", s.name, m,
                      cuda::gemm_split_count(s.n, s.k), best[0], best_v[0], best[1], best_v[1]);
    }
  }
  if (sweep_variants) {
    fmt::print("\nSplit-count experiment:\n\n{}", splits_table);
    fmt::print("\nTile variants (size class by M: ≤16 small, ≤256 mid, else large):\n\n{}", sweep);
  }
  fmt::print("\nGEMM plans (verified at startup):\n");
  for (const auto& line : cuda_gemm_plan_report(*inv)) fmt::print("  {}\n", line);
  fmt::print("\n{}", table);
  return 0;
}
