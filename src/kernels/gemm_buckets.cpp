// GEMM plan buckets (gemm_buckets.h): powers of two up to 128, then four steps a doubling.
#include "kernels/gemm_buckets.h"

#include "core/error.h"

namespace detllm::kernels {
namespace {
constexpr int32_t kFineFrom = 128;  // from here on, four buckets a doubling

// The largest power of two ≤ v (v ≥ 1).
int32_t floor_pow2(int32_t v) {
  int32_t p = 1;
  while (p <= v / 2) p *= 2;
  return p;
}
}  // namespace

int32_t gemm_bucket_above(int32_t bucket) {
  check(is_gemm_bucket(bucket), "gemm_bucket_above: {} is not a GEMM bucket", bucket);
  if (bucket == kGemmMaxBucket) return kGemmMaxBucket + 1;
  if (bucket < kFineFrom) return 2 * bucket;
  return bucket + floor_pow2(bucket) / 4;
}

int32_t gemm_bucket_below(int32_t bucket) {
  check(is_gemm_bucket(bucket), "gemm_bucket_below: {} is not a GEMM bucket", bucket);
  if (bucket <= kFineFrom) return bucket / 2;  // 1 → 0
  return bucket - floor_pow2(bucket - 1) / 4;
}

bool is_gemm_bucket(int32_t b) {
  if (b < 1 || b > kGemmMaxBucket) return false;
  if (b <= kFineFrom) return (b & (b - 1)) == 0;
  const int32_t step = floor_pow2(b - 1) / 4;  // b in (p, 2p]: multiples of p/4
  return b % step == 0;
}

int32_t gemm_bucket(int32_t m) {
  check(m >= 1, "gemm_bucket: m must be >= 1 (got {})", m);
  if (m >= kGemmMaxBucket) return kGemmMaxBucket;
  if (m <= kFineFrom) {
    int32_t b = 1;
    while (b < m) b *= 2;
    return b;
  }
  const int32_t step = floor_pow2(m - 1) / 4;  // m in (p, 2p]: round up to a multiple of p/4
  return (m + step - 1) / step * step;
}

std::vector<int32_t> gemm_sweep_ms(int32_t lo, int32_t hi, int32_t granule) {
  check(lo >= 1 && lo <= hi, "gemm_sweep_ms: need 1 <= lo <= hi (got {}, {})", lo, hi);
  check(granule >= 1, "gemm_sweep_ms: granule must be >= 1 (got {})", granule);
  std::vector<int32_t> out;
  for (int32_t m = lo; m <= hi; ++m)
    if (m == lo || m == hi || m <= kGemmSweepEveryMUpTo || m % granule == 0 ||
        m % granule == 1 % granule)
      out.push_back(m);
  return out;
}

}  // namespace detllm::kernels
