// The M buckets of the invariant GEMM's plans (kernels/cuda/gemm_lt.h): each (weight shape,
// bucket) has one execution, chosen among executions verified to give the invariant kernel's
// bits, and it runs every m in (the bucket below, bucket]. A bucket's execution is timed at its
// top, so the coarser the buckets, the more an m just above a bucket boundary pays for tiles
// sized for twice its rows: with power-of-two buckets the engine's mixed steps of 257–383 rows
// ran their GEMMs 0.55–0.85× as fast as cuBLAS at the exact m (docs/cuda.md, "GEMM buckets").
//
//   1, 2, 4, …, 128, then four a doubling: 160, 192, 224, 256, 320, 384, 448, 512, 640, …, 8192
//
// (a bucket at most 1.25× the one below from 128 on). Host logic only: the plan file validates
// persisted buckets with it (kernels/gemm_plan_file.h) and CI tests it
// (tests/kernels/gemm_buckets_test.cpp). Buckets change no bit: every execution of every bucket
// gives the invariant kernel's bits (design.md Rule 1).
#pragma once

#include <cstdint>
#include <vector>

namespace detllm::kernels {

inline constexpr int32_t kGemmMaxBucket = 8192;  // larger m run the 8192 plan

// The bucket of m ≥ 1: the smallest bucket ≥ m, at most kGemmMaxBucket.
int32_t gemm_bucket(int32_t m);
// Whether b is one of the buckets.
bool is_gemm_bucket(int32_t b);
// The bucket below a bucket (0 for the first): the bucket runs m in (below, bucket].
int32_t gemm_bucket_below(int32_t bucket);
// The bucket above a bucket (past kGemmMaxBucket: kGemmMaxBucket + 1, to end loops).
int32_t gemm_bucket_above(int32_t bucket);

// The m of [lo, hi] at which a plan's execution is verified before it serves a bucket
// (kernels/cuda/gemm_lt.cpp). A cuBLASLt execution with tiles of `granule` rows along m (the
// gcd of its tile's extents; 1 when unknown) launches the same grid for every m with the same
// ceil(m / granule), and the rows of a partial tile are masked, not computed another way; so
// between two tile counts only the first and the last m of each are verified: lo, hi, every m
// ≤ kGemmSweepEveryMUpTo (small GEMMs cost little), and each m ≡ 0 or 1 (mod granule). With
// granule 1 that is every m. Sorted, unique, within [lo, hi]; lo ≤ hi, granule ≥ 1.
inline constexpr int32_t kGemmSweepEveryMUpTo = 128;
std::vector<int32_t> gemm_sweep_ms(int32_t lo, int32_t hi, int32_t granule);

}  // namespace detllm::kernels
