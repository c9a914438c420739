// The GEMM plan file: the executions the CUDA backend's planner chose for the invariant GEMM
// (kernels/cuda/gemm_lt.h: one per weight shape and M bucket), saved so that a restart skips
// the tuning. Format, parse and validate only — no CUDA here, so CI tests it without a GPU
// (tests/kernels/gemm_plan_file_test.cpp, malformed input included).
//
// Nothing read from a file is trusted: this layer refuses a malformed, truncated or foreign
// file with a message, and the planner re-verifies every persisted cuBLASLt execution's bits
// against the invariant kernel before using it (a file can make a start slower, never a
// result different).
//
// Layout (every integer little-endian):
//   offset  size
//   0       8       magic "DLGEMMPL"
//   8       4       version (kGemmPlanFileVersion)
//   12      4       key length L (1 … kGemmPlanMaxKeyBytes)
//   16      L       key: what the plans are valid for (GPU name + UUID, driver, CUDA runtime,
//                   cuBLASLt version, the GEMM numerics rule, the workspace), printable ASCII
//   16+L    4       entry count E (0 … kGemmPlanMaxEntries)
//   20+L    E × 96  entries, each:
//                     0  8  n (output features)      8  8  k (input features)
//                    16  4  bucket (M bucket, kernels/gemm_buckets.h, ≤ 8192)
//                    20  4  splits (S of the shape when it was tuned; k % S == 0, or with
//                           tile_runs S ≤ ⌈k / 128⌉)
//                    24  4  flags: bit 0 use_lt, bit 1 chain, bit 2 tile_runs (others 0)
//                    28  4  reserved (0)
//                    32 64  cublasLtMatmulAlgo_t as 8 uint64 (all 0 when not use_lt)
//   20+L+96E 16     XXH3-128 of every byte before it (lo, then hi)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace detllm::kernels {

inline constexpr uint32_t kGemmPlanFileVersion = 1;
inline constexpr size_t kGemmPlanMaxKeyBytes = 4096;
inline constexpr size_t kGemmPlanMaxEntries = 65536;
inline constexpr size_t kGemmPlanEntryBytes = 96;
inline constexpr int64_t kGemmPlanMaxDim = int64_t{1} << 22;  // n and k (vocab ≤ 4M)
inline constexpr int32_t kGemmPlanMaxSplits = 64;

// One plan: what runs y (m, n) = x (m, k) · Wᵀ for m in (gemm_bucket_below(bucket), bucket].
struct GemmPlanEntry {
  int64_t n = 0;
  int64_t k = 0;
  int32_t bucket = 0;
  int32_t splits = 1;
  bool use_lt = false;  // false: the invariant kernel was the fastest (nothing else to save)
  bool chain = false;   // S unsplit cuBLASLt calls over the K slices, merged through beta = 1
  // The slices are the FP8 GEMM's runs (kernels/cuda/fp8_launch.h, fp8_gemm_wg_split_runs):
  // ⌈⌈k / 128⌉ / S⌉ 128-column tiles each, the last one shorter; false: S slices of k / S.
  bool tile_runs = false;
  std::array<uint64_t, 8> algo{};  // the cublasLtMatmulAlgo_t (documented as copyable)
  friend bool operator==(const GemmPlanEntry&, const GemmPlanEntry&) = default;
};

struct GemmPlanFile {
  std::string key;
  std::vector<GemmPlanEntry> entries;  // at most one per (n, k, bucket)
};

// The file's bytes (entries sorted by (n, k, bucket)). Throws detllm::Error if `file` itself
// breaks a rule parse() checks (so a written file always parses).
std::vector<std::byte> format_gemm_plan_file(const GemmPlanFile& file);
// Parses and validates every field; throws detllm::Error saying what is wrong (bad magic,
// version, truncation, checksum, an absurd count or field, a duplicate entry).
GemmPlanFile parse_gemm_plan_file(std::span<const std::byte> bytes);
// Throws detllm::Error for an entry parse() would refuse (shape, bucket, splits, flags).
void validate_gemm_plan_entry(const GemmPlanEntry& e);

// What loading a plan file for `key` gave: the entries, or none with the reason.
struct GemmPlanLoad {
  bool found = false;                  // a file existed at the path
  std::vector<GemmPlanEntry> entries;  // usable entries (empty when refused)
  std::string warning;                 // why a file that exists was not used; "" if it was
};
// Reads `path`; a missing file is no warning (first start). A file that cannot be read, is
// malformed or was written for another key gives a warning and no entries — never a throw.
GemmPlanLoad load_gemm_plan_file(const std::string& path, std::string_view key);
// Writes atomically (a temporary file in the same folder, then rename), creating the folder.
// Throws detllm::Error, with the path, when it cannot.
void write_gemm_plan_file(const std::string& path, const GemmPlanFile& file);

// The default location of the plan file for `key`:
//   $XDG_CACHE_HOME/detllm/gemm-plans-<16 hex digits of the key's hash>.bin, or
//   $HOME/.cache/detllm/… ; nullopt when neither variable is set (then no cache).
// xdg_cache_home / home: the variables' values (nullptr = unset), passed in for tests.
std::optional<std::string> default_gemm_plan_cache_path(std::string_view key,
                                                        const char* xdg_cache_home,
                                                        const char* home);
// The same from the process environment.
std::optional<std::string> default_gemm_plan_cache_path(std::string_view key);

}  // namespace detllm::kernels
