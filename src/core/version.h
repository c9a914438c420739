// Engine version and build description, reported in fingerprints and --version.
#pragma once

#include <string_view>

namespace detllm {

std::string_view engine_version();
// The -march level the CPU backend was built for: it fixes the SIMD width and so the
// reduction order of every CPU kernel (part of the numerics fingerprint).
std::string_view cpu_simd_arch();

}  // namespace detllm
