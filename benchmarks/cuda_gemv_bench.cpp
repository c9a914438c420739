// The invariant GEMM at small M (1…16, the decode batches of 1 to 16 sequences) on Llama-3.1-8B's
// layer shapes: the small-m schedules' configurations (gemv.cu's warp rings, gemv_stream.cu's
// CTA-wide stream, plain and with PDL), gemm.cu's small tiles, "ours"
// (what the engine runs by default: per (shape, M bucket) the invariant kernel or a cuBLASLt
// execution verified bit-equal to it, whichever is faster), "ours + gemv" (the same with the
// GEMV as the kernel: CudaOptions::gemm_gemv = 1) and default cuBLAS (the fast path, no
// guarantee). Everything goes through Ops::matmul_rounded (bf16 x, as the model's layers),
// weights rotated over copies larger than the L2. Prints µs, the weight-streaming rate (TB/s:
// weight bytes ÷ time; x and y are < 0.1% of them) with its fraction of the measured copy rate,
// and the ratios cuBLAS ÷ ours and cuBLASLt-plan ÷ GEMV. Every configuration's output is
// compared bit for bit with the tiles' (a mismatch is printed and makes the exit code 1).
// Run: build-cuda/benchmarks/cuda_gemv_bench [--quick] [--ms 1,8] [--shapes o,qkv] [--configs 0,6]
// (--configs: the small-m configurations timed; the others are not built. With a short list a
// profiler sees only those kernels: scripts/gpu/gemv_ncu.sh.)   Exits with a message without a GPU.
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_args.h"
#include "gemm_bench_util.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/ops.h"
#include "ops_bench_util.h"

using namespace detllm;
using namespace detllm::kernels;

namespace {

using bench_util::fill;
using bench_util::Shape;
using bench_util::time_us;
using bench_util::weight_copies;

// Device-to-device copy rate (read + write bytes ÷ time) of a 1 GiB buffer: the roofline the
// streaming rates are compared with.
double copy_rate_tbs(Ops& ops) {
  const size_t bytes = size_t{1} << 30;
  Buffer a(ops, bytes), b(ops, bytes);
  ops.synchronize();
  const double us = time_us(ops, [&](int) { ops.copy(b.data(), a.data(), bytes); });
  return 2.0 * double(bytes) / us * 1e-6;
}

std::unique_ptr<Ops> ops_with(bool lt, int gemv, int pdl = 0) {
  CudaOptions o;
  o.gemm_lt = lt;
  o.gemm_gemv = gemv;
  o.programmatic_launch = pdl;
  return make_cuda_ops(o);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<int> ms_arg, configs_arg;
  std::vector<std::string> shapes_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--quick") {
      quick = true;
    } else if (a == "--ms" && i + 1 < argc) {
      ms_arg = bench_util::parse_counts(argv[++i]);
      ok = !ms_arg.empty() && *std::max_element(ms_arg.begin(), ms_arg.end()) <= cuda::kGemvMaxM;
    } else if (a == "--configs" && i + 1 < argc) {
      configs_arg = bench_util::parse_counts(argv[++i], 0);
      ok = !configs_arg.empty() &&
           *std::max_element(configs_arg.begin(), configs_arg.end()) < cuda::kGemvConfigs;
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes_arg = bench_util::parse_names(argv[++i]);
      ok = !shapes_arg.empty();
    } else {
      ok = false;
    }
    if (!ok) {
      fmt::print(stderr,
                 "usage: {} [--quick] [--ms LIST (1..{})] [--shapes LIST (qkv,o,gate_up,down,"
                 "lm_head)] [--configs LIST (0..{})]\n",
                 argv[0], cuda::kGemvMaxM, cuda::kGemvConfigs - 1);
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    fmt::print("cuda_gemv_bench: no CUDA device: nothing to measure\n");
    return 0;
  }
  fmt::print("device: {}\n", cuda_device_description(0));
  auto ours = ops_with(true, -1);
  auto ours_gemv = ops_with(true, 1);
  auto fast = make_cuda_ops({0, NumericsMode::kFast});
  auto tiles = ops_with(false, 0);
  // Every configuration launched plainly, then the CTA-wide stream configurations with PDL
  // (back-to-back launches of the same GEMM: the next one's ring fills during this one's tail).
  std::vector<int> chosen = configs_arg;
  if (chosen.empty())
    for (int c = 0; c < cuda::kGemvConfigs; ++c) chosen.push_back(c);
  std::vector<std::unique_ptr<Ops>> configs;
  std::vector<std::string> names;
  for (int c : chosen) {
    configs.push_back(ops_with(false, c + 1));
    names.push_back(fmt::format("c{}", c));
  }
  for (int c : chosen) {
    if (c < cuda::kGemvWarpConfigs) continue;
    configs.push_back(ops_with(false, c + 1, 1));
    names.push_back(fmt::format("c{}+PDL", c));
  }
  const int n_configs = static_cast<int>(configs.size());
  const double copy_tbs = copy_rate_tbs(*ours);
  fmt::print("device copy rate: {:.2f} TB/s (read + write of 1 GiB)\n", copy_tbs);

  std::vector<Shape> shapes = {{"qkv 4096->6144", 6144, 4096},
                               {"o 4096->4096", 4096, 4096},
                               {"gate_up 4096->28672", 28672, 4096},
                               {"down 14336->4096", 4096, 14336},
                               {"lm_head 4096->128256", 128256, 4096}};
  if (!shapes_arg.empty()) {  // by the name's first word
    std::vector<Shape> kept;
    for (const Shape& s : shapes) {
      const std::string tag = std::string(s.name).substr(0, std::string(s.name).find(' '));
      if (std::find(shapes_arg.begin(), shapes_arg.end(), tag) != shapes_arg.end())
        kept.push_back(s);
    }
    if (kept.empty()) {
      fmt::print(stderr, "cuda_gemv_bench: --shapes names none of qkv,o,gate_up,down,lm_head\n");
      return 2;
    }
    shapes = kept;
  }
  std::vector<int> ms = {1, 2, 4, 8, 12, 16};
  if (quick) ms = {1, 8, 16};
  if (!ms_arg.empty()) ms = ms_arg;
  const int max_m = 16;
  const int64_t max_k = 14336;
  Buffer x(*ours, size_t(max_m) * max_k * 2);
  {
    std::vector<float> h(size_t(max_m) * max_k);
    fill(h, 1, 1.0f);
    std::vector<uint16_t> hb(h.size());
    for (size_t i = 0; i < h.size(); ++i) hb[i] = f32_to_bf16(h[i]);
    ours->upload(x.data(), hb.data(), hb.size() * 2);
  }
  std::string head = "| shape (K->N) | M |";
  std::string rule = "|---|---|";
  for (const std::string& name : names) {
    head += fmt::format(" gemv {} µs |", name);
    rule += "---|";
  }
  head += " tiles µs | ours µs | ours + gemv µs | cuBLAS µs | best gemv TB/s | of copy rate | "
          "cuBLAS ÷ ours + gemv | ours ÷ best gemv | tiles ÷ best gemv |\n";
  rule += "---|---|---|---|---|---|---|---|---|\n";
  std::string table = head + rule;
  fmt::print("{}", table);
  int mismatches = 0;
  for (const Shape& s : shapes) {
    const double w_bytes = double(s.n) * double(s.k) * 2.0;
    const std::vector<Buffer> ws = weight_copies(*ours, s, 2);
    const int n_copies = static_cast<int>(ws.size());
    Buffer y(*ours, size_t(max_m) * s.n * 4);
    ours->synchronize();
    for (int m : ms) {
      auto call = [&](Ops& ops, int i) {
        const WeightMatrix w{ws[i % n_copies].data(), DType::kBF16, s.n, s.k};
        ops.matmul_rounded(x.data(), m, w, nullptr, y.f32(), s.n);
      };
      auto output = [&](Ops& ops) {
        call(ops, 0);
        ops.synchronize();
        std::vector<float> h(size_t(m) * s.n);
        ops.download(h.data(), y.data(), h.size() * 4);
        return h;
      };
      const std::vector<float> want = output(*tiles);
      std::string row = fmt::format("| {} | {} |", s.name, m);
      double best = 1e30;
      for (int c = 0; c < n_configs; ++c) {
        if (output(*configs[c]) != want) {  // float == compares values; NaN-free inputs
          fmt::print("MISMATCH: {} m {} gemv {} differs from the tiles\n", s.name, m, names[c]);
          ++mismatches;
        }
        const double t = time_us(*configs[c], [&](int i) { call(*configs[c], i); });
        best = std::min(best, t);
        row += fmt::format(" {:.1f} |", t);
      }
      const double t_tiles = time_us(*tiles, [&](int i) { call(*tiles, i); });
      const double t_ours = time_us(*ours, [&](int i) { call(*ours, i); });
      const double t_ours_gemv = time_us(*ours_gemv, [&](int i) { call(*ours_gemv, i); });
      const double t_cub = time_us(*fast, [&](int i) { call(*fast, i); });
      const double tbs = w_bytes / best * 1e-6;
      row += fmt::format(" {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n",
                         t_tiles, t_ours, t_ours_gemv, t_cub, tbs, tbs / copy_tbs,
                         t_cub / t_ours_gemv, t_ours / best, t_tiles / best);
      fmt::print("{}", row);
      std::fflush(stdout);
      table += row;
    }
  }
  fmt::print("\nGEMM plans of \"ours + gemv\" (verified at startup):\n");
  for (const auto& line : cuda_gemm_plan_report(*ours_gemv)) fmt::print("  {}\n", line);
  fmt::print("\n{}", table);
  if (mismatches) fmt::print("\n{} MISMATCHES: a configuration's bits differ\n", mismatches);
  return mismatches ? 1 : 0;
}
