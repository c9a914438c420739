// 128-bit hashing (XXH3) for identities that must survive process restarts: the chained key of a
// full KV block (design.md Rule 4) and byte-stream digests for fingerprints. Every input is
// encoded little-endian explicitly, so a key depends on the values hashed, never on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace detllm {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const Hash128&, const Hash128&) = default;
};

// For unordered containers keyed by Hash128 (the bits are already uniformly mixed).
struct Hash128Hasher {
  size_t operator()(const Hash128& h) const noexcept {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull));
  }
};

// 32 lowercase hex digits, hi word first.
std::string to_hex(const Hash128& h);

// XXH3-128 of raw bytes.
Hash128 hash_bytes(std::span<const std::byte> bytes, uint64_t seed = 0);

// The key of a full KV block, chained so that it identifies every token up to the block's end:
//
//   key(block 0) = H(kRootBlockHash, numerics_class, tokens[0 .. B))
//   key(block j) = H(key(block j-1), numerics_class, tokens[jB .. (j+1)B))
//
// numerics_class separates KV computed under different numerics (mode, kernels, dtype): two
// sequences share a cached block only if their whole prefix and their numerics agree.
using BlockHash = Hash128;
inline constexpr BlockHash kRootBlockHash{};

BlockHash hash_block(const BlockHash& parent, uint64_t numerics_class,
                     std::span<const int32_t> tokens);

}  // namespace detllm
