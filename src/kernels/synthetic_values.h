// The synthetic-weight generator, one value at a time: element i of a tensor with key K is
// center + scale * (2u - 1), u = (splitmix64(K + i) >> 40) * 2^-24 — integer mixing and two
// rounded float ops (no FMA: the project builds with -ffp-contract=off). model/synthetic.cpp
// draws host weights with it, Ops::fill_uniform's host default fills backend memory with it,
// and src/kernels/cuda/synthetic.cu repeats it with __fmul_rn/__fadd_rn, bit for bit.
// Tests: tests/model/synthetic_backend_test.cpp, tests/cuda/cuda_synthetic_test.cpp.
#pragma once

#include <cstdint>

namespace detllm::kernels {

// splitmix64's finaliser: portable, stateless.
inline constexpr uint64_t synthetic_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Value `index` of the tensor keyed `key`, uniform in [center - scale, center + scale].
// A slice [a, b) of a tensor is the tensor keyed key + a, from index 0.
inline float synthetic_value(uint64_t key, uint64_t index, float center, float scale) {
  const uint64_t r = synthetic_mix(key + index);
  const float u = static_cast<float>(r >> 40) * 0x1.0p-24f;  // [0, 1), exact
  return center + scale * (2.0f * u - 1.0f);
}

}  // namespace detllm::kernels
