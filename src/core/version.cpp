// Engine version and build description, reported in fingerprints and --version.
#include "core/version.h"

namespace detllm {

std::string_view engine_version() { return DETLLM_VERSION; }
std::string_view cpu_simd_arch() { return DETLLM_CPU_ARCH; }

}  // namespace detllm
