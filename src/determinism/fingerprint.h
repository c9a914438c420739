// The numerics fingerprint (design.md section 1): everything that fixes a deterministic
// request's bits besides its prompt and sampling parameters — the weights, the engine build and
// its numerics revision, the backend and its SIMD/GPU/library versions, and every
// numerics-relevant setting. Two runs with the same fingerprint give the same bits; returned as
// OpenAI's system_fingerprint.
// Execution settings that change no bit stay out of it, so that tuning them keeps the
// fingerprint: threads, step budget, chunking, batch limit, KV pool and block size (attention
// reduces in splits aligned to absolute positions on both backends; the block size only
// addresses the pages: tests/e2e/test_restart.py, the mixed-traffic property rounds).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/version.h"

namespace detllm {

struct FingerprintInputs {
  uint64_t weights_hash = 0;
  std::string backend;        // "cpu", "cuda:<gpu>:<driver>:<cublas>"
  std::string backend_build;  // e.g. the CPU SIMD arch
  std::string numerics_mode;  // the mode that served the request
  int32_t numerics_revision = kNumericsRevision;  // core/version.h: the kernels' numerics
};

// The fields the fingerprint hashes, as (name, value) in the hashed order: detllm (engine
// version), numerics, weights (16 hex digits), backend, build, libc, mode. Published beside the
// fingerprint (GET /v1/models) so that two replicas whose fingerprints differ can be told which
// of them differ (docs/ray.md); the hash is over exactly these, so the two cannot drift apart.
std::vector<std::pair<std::string, std::string>> fingerprint_fields(const FingerprintInputs& in);

// "fp_" + 16 hex digits of XXH3 over every input; stable across runs and machines.
std::string numerics_fingerprint(const FingerprintInputs& in);

}  // namespace detllm
