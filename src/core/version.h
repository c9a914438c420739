// Engine version and build description, reported in fingerprints and --version.
#pragma once

#include <cstdint>
#include <string_view>

namespace detllm {

// The numerics revision: raised by every change that can move a deterministic request's bits
// on any backend — a kernel's reduction order or split, a rounding point, an approximation
// (exp2, rsqrt), a GEMM plan's K order. It is hashed into the numerics fingerprint, so two
// builds whose bits may differ never share a fingerprint, while a change that keeps every bit
// (a faster schedule, shown bit-identical by the tests) keeps it. engine_version() alone does
// not do this: it changes with releases, not with kernels.
//   1  2026-12-02: the first revision (the bits of this build, on every backend).
inline constexpr int32_t kNumericsRevision = 1;

std::string_view engine_version();
// The -march level the CPU backend was built for: it fixes the SIMD width and so the
// reduction order of every CPU kernel (part of the numerics fingerprint).
std::string_view cpu_simd_arch();

}  // namespace detllm
