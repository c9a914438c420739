// 128-bit hashing with XXH3 (streaming, so a block of any size hashes without allocating).
// Values are serialised little-endian byte by byte: the same tokens give the same key on any
// host and in any process (design.md V9).
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include "core/hash.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <array>
#include <type_traits>

namespace detllm {

namespace {

template <typename T>
void put_le(uint8_t* out, T value) {
  auto v = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

Hash128 from_xxh(XXH128_hash_t h) {
  return Hash128{h.low64, h.high64};
}

}  // namespace

std::string to_hex(const Hash128& h) {
  return fmt::format("{:016x}{:016x}", h.hi, h.lo);
}

Hash128 hash_bytes(std::span<const std::byte> bytes, uint64_t seed) {
  return from_xxh(XXH3_128bits_withSeed(bytes.data(), bytes.size(), seed));
}

BlockHash hash_block(const BlockHash& parent, uint64_t numerics_class,
                     std::span<const int32_t> tokens) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_128bits_reset(&state);

  // Header: parent key, numerics class, token count (so blocks of different sizes never alias).
  std::array<uint8_t, 28> header{};
  put_le(header.data(), parent.lo);
  put_le(header.data() + 8, parent.hi);
  put_le(header.data() + 16, numerics_class);
  put_le(header.data() + 24, static_cast<uint32_t>(tokens.size()));
  XXH3_128bits_update(&state, header.data(), header.size());

  std::array<uint8_t, 1024> buf;
  size_t used = 0;
  for (int32_t t : tokens) {
    if (used == buf.size()) {
      XXH3_128bits_update(&state, buf.data(), used);
      used = 0;
    }
    put_le(buf.data() + used, t);
    used += 4;
  }
  if (used > 0) XXH3_128bits_update(&state, buf.data(), used);
  return from_xxh(XXH3_128bits_digest(&state));
}

}  // namespace detllm
