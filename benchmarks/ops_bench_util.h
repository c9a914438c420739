// For the GEMM benchmark that times through an Ops object (cuda_gemm_bench): weight copies
// that stream from HBM, and the timer.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "gemm_bench_util.h"
#include "kernels/ops.h"

namespace detllm::bench_util {

// The bf16 weight of `s` filled from `seed`, plus copies of it, so that rotating over them
// streams W from HBM rather than from the 60 MB L2 (about 256 MiB in all).
inline std::vector<kernels::Buffer> weight_copies(kernels::Ops& ops, const Shape& s, uint64_t seed) {
  const size_t w_bytes = size_t(s.n) * s.k * 2;
  const int n_copies = static_cast<int>(std::max<size_t>(1, (size_t(256) << 20) / w_bytes + 1));
  std::vector<float> f(size_t(s.n) * s.k);
  fill(f, seed, 1.0f / std::sqrt(static_cast<float>(s.k)));
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
  std::vector<kernels::Buffer> ws;
  ws.emplace_back(ops, w_bytes);
  ops.upload(ws[0].data(), h.data(), w_bytes);
  for (int c = 1; c < n_copies; ++c) {
    ws.emplace_back(ops, w_bytes);
    ops.copy(ws.back().data(), ws[0].data(), w_bytes);
  }
  return ws;
}

inline double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median over 5 repetitions of the mean time of `iters` back-to-back calls (µs).
template <typename F>
double time_us(kernels::Ops& ops, F&& call) {
  for (int i = 0; i < 3; ++i) call(i);
  ops.synchronize();
  double t0 = seconds();
  call(0);
  ops.synchronize();
  const double one = seconds() - t0;
  const int iters = static_cast<int>(std::clamp(0.02 / std::max(one, 1e-6), 5.0, 2000.0));
  std::vector<double> reps;
  for (int r = 0; r < 5; ++r) {
    t0 = seconds();
    for (int i = 0; i < iters; ++i) call(i);
    ops.synchronize();
    reps.push_back((seconds() - t0) / iters * 1e6);
  }
  std::sort(reps.begin(), reps.end());
  return reps[2];
}

}  // namespace detllm::bench_util
