// Numerics fingerprint: XXH3 over a canonical text of the inputs.
#include "determinism/fingerprint.h"

#include <fmt/format.h>
#include <gnu/libc-version.h>
#include <xxhash.h>

#include "core/version.h"

namespace detllm {

std::string numerics_fingerprint(const FingerprintInputs& in) {
  const std::string canon =
      // The C library is included: the CPU RoPE takes cos/sin from libm.
      fmt::format("detllm={};numerics={};weights={:016x};backend={};build={};libc={};mode={}",
                  engine_version(), in.numerics_revision, in.weights_hash, in.backend,
                  in.backend_build, gnu_get_libc_version(), in.numerics_mode);
  return fmt::format("fp_{:016x}", XXH3_64bits(canon.data(), canon.size()));
}

}  // namespace detllm
