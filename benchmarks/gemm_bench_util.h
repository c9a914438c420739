// Shared by the GEMM benchmarks (cuda_gemm_bench, cuda_gemm_lt_bench): a weight shape and the
// cheap deterministic fill their inputs and weights come from.
#pragma once

#include <cstdint>
#include <vector>

namespace detllm::bench_util {

struct Shape {
  const char* name;
  int64_t n, k;  // y (m, n) = x (m, k) · wᵀ, w (n, k)
};

// Cheap deterministic fill (xorshift), values in [-a, a).
inline void fill(std::vector<float>& v, uint64_t seed, float a) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f) * a;
  }
}

}  // namespace detllm::bench_util
