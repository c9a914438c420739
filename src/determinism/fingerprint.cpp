// Numerics fingerprint: XXH3 over a canonical text of the inputs.
#include "determinism/fingerprint.h"

#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <xxhash.h>

#include "core/version.h"

namespace detllm {

std::vector<std::pair<std::string, std::string>> fingerprint_fields(const FingerprintInputs& in) {
  return {{"detllm", std::string(engine_version())},
          {"numerics", std::to_string(in.numerics_revision)},
          {"weights", fmt::format("{:016x}", in.weights_hash)},
          {"backend", in.backend},
          {"build", in.backend_build},
          // The C library is included: the CPU RoPE takes cos/sin from libm.
          {"libc", gnu_get_libc_version()},
          {"mode", in.numerics_mode}};
}

std::string numerics_fingerprint(const FingerprintInputs& in) {
  // "detllm=…;numerics=…;weights=…;backend=…;build=…;libc=…;mode=…"
  std::string canon;
  for (const auto& [name, value] : fingerprint_fields(in)) {
    if (!canon.empty()) canon += ';';
    canon += name + '=' + value;
  }
  return fmt::format("fp_{:016x}", XXH3_64bits(canon.data(), canon.size()));
}

}  // namespace detllm
