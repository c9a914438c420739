// Numerics fingerprint: XXH3 over a canonical text of the inputs.
#include "determinism/fingerprint.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "core/version.h"

namespace detllm {

std::string numerics_fingerprint(const FingerprintInputs& in) {
  const std::string canon =
      fmt::format("detllm={};weights={:016x};backend={};build={};block={};mode={}",
                  engine_version(), in.weights_hash, in.backend, in.backend_build,
                  in.kv_block_size, in.numerics_mode);
  return fmt::format("fp_{:016x}", XXH3_64bits(canon.data(), canon.size()));
}

}  // namespace detllm
