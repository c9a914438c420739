// Batch-invariant GEMM on the tensor cores: y (m, n) = x (m, k) · w (n, k)ᵀ, bf16 operands,
// fp32 accumulation (mma.sync.m16n8k16). Invariance by construction (design.md Rule 2): the
// K range is cut into S splits, S = gemm_split_count(n, k) — a function of the weight shape
// alone (today 1 for every shape, see below); each split accumulates its k16 steps in ascending order from zero; the splits are
// merged left to right ((p0 + p1) + p2) + …; then + bias. Tile shapes, the grid and where
// the splits run (one block each with an ordered merge by the last one to finish, or one after
// another inside one block) are chosen from m, but none of them changes that sequence, so a
// row's bits never depend on m or on the row's place in the batch. No float atomics.
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaGemm*'; bench: build-cuda/benchmarks/cuda_gemm_bench.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda {

// ---- the numerics: split count per weight shape ----------------------------------------
// gemm_split_count / gemm_effective_splits: kernels/gemm_splits.h (host code, shared with the
// reduction-order analyzer, verify/reduction_order).
namespace {
constexpr int kSplitAlign = kGemmSplitAlign;  // split boundaries are multiples of every BK
}  // namespace

namespace {

using ptx::cp_async16_zfill;  // src_bytes 0 writes zeros (out-of-range rows/cols)
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::ldmatrix_x4;
using ptx::mma_bf16;
using ptx::pack_bf16;

struct GemmParams {
  const void* a;         // (m, k): fp32 when A_F32, else bf16
  const uint16_t* w;     // (n, k) bf16
  const float* bias;     // (n) or nullptr
  float* y;              // (m, n)
  float* partials;       // (splits, m, n) when split_blocks
  int32_t* counters;     // (tiles_m * tiles_n) when split_blocks
  int32_t m, n, k;
  int32_t splits;        // S of the shape
  int32_t tiles_per_split;
  int32_t total_tiles;   // S * tiles_per_split
  bool split_blocks;     // one block per split (blockIdx.z) + ordered merge by the last block
};

// Block tile BM×BN, k tile BK, WARPS_M×WARPS_N warps, STAGES-deep cp.async pipeline.
// A_F32: A is read as fp32 and rounded to bf16 while building fragments (small m: saves the
// conversion pass); otherwise A is bf16 (converted once by the caller) and read by ldmatrix.
// MULTI: the block runs several splits (needs a second accumulator set for the merge).
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, bool A_F32_>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_;
  static constexpr bool A_F32 = A_F32_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
  static constexpr int MT = WTM / 16, NT = WTN / 8;             // mma tiles per warp
  static constexpr int A_LD = A_F32 ? BK + 4 : BK + 8;          // smem row stride (elements)
  static constexpr int B_LD = BK + 8;
  static constexpr int A_BYTES = BM * A_LD * (A_F32 ? 4 : 2);
  static constexpr int B_BYTES = BN * B_LD * 2;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "tile shapes");
  static_assert(kSplitAlign % BK == 0, "split boundaries must fall on k-tile edges");
};

template <class C>
__device__ inline void load_tile(const GemmParams& p, unsigned char* stage, int tile, int m0,
                                 int n0) {
  const int k0 = tile * C::BK;
  // A: BM rows × BK cols.
  if constexpr (C::A_F32) {
    float* as = reinterpret_cast<float*>(stage);
    const float* a = static_cast<const float*>(p.a);
    constexpr int CH = C::BK / 4;  // 16-byte chunks per row
    for (int c = threadIdx.x; c < C::BM * CH; c += C::kThreads) {
      const int r = c / CH, kc = (c % CH) * 4;
      const int gr = m0 + r, gk = k0 + kc;
      const bool ok = gr < p.m && gk < p.k;
      cp_async16_zfill(as + r * C::A_LD + kc, ok ? a + static_cast<int64_t>(gr) * p.k + gk : a, ok ? 16 : 0);
    }
  } else {
    uint16_t* as = reinterpret_cast<uint16_t*>(stage);
    const uint16_t* a = static_cast<const uint16_t*>(p.a);
    constexpr int CH = C::BK / 8;
    for (int c = threadIdx.x; c < C::BM * CH; c += C::kThreads) {
      const int r = c / CH, kc = (c % CH) * 8;
      const int gr = m0 + r, gk = k0 + kc;
      const bool ok = gr < p.m && gk < p.k;
      cp_async16_zfill(as + r * C::A_LD + kc, ok ? a + static_cast<int64_t>(gr) * p.k + gk : a, ok ? 16 : 0);
    }
  }
  // B (= W rows): BN rows × BK cols, bf16.
  uint16_t* bs = reinterpret_cast<uint16_t*>(stage + C::A_BYTES);
  constexpr int CH = C::BK / 8;
  for (int c = threadIdx.x; c < C::BN * CH; c += C::kThreads) {
    const int r = c / CH, kc = (c % CH) * 8;
    const int gn = n0 + r, gk = k0 + kc;
    const bool ok = gn < p.n && gk < p.k;
    cp_async16_zfill(bs + r * C::B_LD + kc, ok ? p.w + static_cast<int64_t>(gn) * p.k + gk : p.w, ok ? 16 : 0);
  }
}

template <class C>
__device__ inline void compute_stage(const unsigned char* stage, int warp_m, int warp_n,
                                     float (&acc)[C::MT][C::NT][4]) {
  const int lane = threadIdx.x & 31;
  const uint16_t* bs = reinterpret_cast<const uint16_t*>(stage + C::A_BYTES);
#pragma unroll
  for (int kk = 0; kk < C::BK; kk += 16) {
    uint32_t af[C::MT][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt) {
      const int row0 = warp_m * C::WTM + mt * 16;
      if constexpr (C::A_F32) {
        const float* as = reinterpret_cast<const float*>(stage);
        const int g = lane >> 2, t = lane & 3;
        const float* r0 = as + (row0 + g) * C::A_LD + kk + 2 * t;
        const float* r1 = r0 + 8 * C::A_LD;
        const float2 v00 = *reinterpret_cast<const float2*>(r0);
        const float2 v10 = *reinterpret_cast<const float2*>(r1);
        const float2 v01 = *reinterpret_cast<const float2*>(r0 + 8);
        const float2 v11 = *reinterpret_cast<const float2*>(r1 + 8);
        af[mt][0] = pack_bf16(v00.x, v00.y);
        af[mt][1] = pack_bf16(v10.x, v10.y);
        af[mt][2] = pack_bf16(v01.x, v01.y);
        af[mt][3] = pack_bf16(v11.x, v11.y);
      } else {
        const uint16_t* as = reinterpret_cast<const uint16_t*>(stage);
        ldmatrix_x4(af[mt], as + (row0 + (lane & 15)) * C::A_LD + kk + (lane >> 4) * 8);
      }
    }
#pragma unroll
    for (int nt2 = 0; nt2 < C::NT / 2; ++nt2) {
      uint32_t bf[4];  // b0, b1 of n-tile 2*nt2, then of n-tile 2*nt2 + 1
      const int nrow = warp_n * C::WTN + nt2 * 16 + (lane >> 4) * 8 + (lane & 7);
      ldmatrix_x4(bf, bs + nrow * C::B_LD + kk + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt) {
        mma_bf16(acc[mt][2 * nt2], af[mt], bf[0], bf[1]);
        mma_bf16(acc[mt][2 * nt2 + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
}

// Calls f(i, j, e, row, col) for each element acc[i][j][e] of this thread's accumulator
// fragments (the mma.m16n8k16 C layout: g = lane / 4 picks the row, lane % 4 the column pair)
// that lies inside the m × n output.
template <class C, class F>
__device__ __forceinline__ void for_each_output(const GemmParams& p, int m0, int n0, int warp_m,
                                                int warp_n, int lane, F&& f) {
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int i = 0; i < C::MT; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + warp_m * C::WTM + i * 16 + g + (e >= 2 ? 8 : 0);
        const int col = n0 + warp_n * C::WTN + j * 8 + 2 * tq + (e & 1);
        if (row < p.m && col < p.n) f(i, j, e, row, col);
      }
}

template <class C, bool MULTI>
__global__ void __launch_bounds__(C::kThreads) gemm_kernel(const GemmParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const int t_begin = p.split_blocks ? blockIdx.z * p.tiles_per_split : 0;
  const int t_end = p.split_blocks ? t_begin + p.tiles_per_split : p.total_tiles;

  float acc[C::MT][C::NT][4];
  float res[MULTI ? C::MT : 1][MULTI ? C::NT : 1][4];  // merged splits so far (MULTI only)
#pragma unroll
  for (int i = 0; i < C::MT; ++i)
#pragma unroll
    for (int j = 0; j < C::NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::STAGES - 1; ++s) {
    if (t_begin + s < t_end) load_tile<C>(p, smem + s * C::STAGE_BYTES, t_begin + s, m0, n0);
    cp_async_commit();
  }
  bool first_split = true;
  for (int t = t_begin; t < t_end; ++t) {
    cp_async_wait<C::STAGES - 2>();
    __syncthreads();
    const int next = t + C::STAGES - 1;
    if (next < t_end)
      load_tile<C>(p, smem + ((next - t_begin) % C::STAGES) * C::STAGE_BYTES, next, m0, n0);
    cp_async_commit();
    compute_stage<C>(smem + ((t - t_begin) % C::STAGES) * C::STAGE_BYTES, warp_m, warp_n, acc);
    if constexpr (MULTI) {
      if ((t + 1) % p.tiles_per_split == 0) {  // end of a split: res = res + acc, left to right
#pragma unroll
        for (int i = 0; i < C::MT; ++i)
#pragma unroll
          for (int j = 0; j < C::NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              res[i][j][e] = first_split ? acc[i][j][e] : __fadd_rn(res[i][j][e], acc[i][j][e]);
              acc[i][j][e] = 0.0f;
            }
        first_split = false;
      }
    }
  }
  cp_async_wait<0>();

  if (!p.split_blocks) {  // every split ran here: write y = merged + bias
    for_each_output<C>(p, m0, n0, warp_m, warp_n, lane, [&](int i, int j, int e, int row, int col) {
      float v;
      if constexpr (MULTI) v = res[i][j][e]; else v = acc[i][j][e];
      if (p.bias != nullptr) v = __fadd_rn(v, p.bias[col]);
      p.y[static_cast<int64_t>(row) * p.n + col] = v;
    });
    return;
  }

  // One split per block: store the partial, count arrivals; the last block of the tile merges
  // the partials in split order 0, 1, …, S-1 (the same sequence as the MULTI path above).
  const int64_t plane = static_cast<int64_t>(p.m) * p.n;
  float* part = p.partials + blockIdx.z * plane;
  for_each_output<C>(p, m0, n0, warp_m, warp_n, lane, [&](int i, int j, int e, int row, int col) {
    part[static_cast<int64_t>(row) * p.n + col] = acc[i][j][e];
  });
  __threadfence();
  __syncthreads();
  __shared__ int is_last;
  const int tile_id = blockIdx.y * gridDim.x + blockIdx.x;
  if (threadIdx.x == 0) is_last = atomicAdd(&p.counters[tile_id], 1) == p.splits - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  for_each_output<C>(p, m0, n0, warp_m, warp_n, lane, [&](int, int, int, int row, int col) {
    const int64_t off = static_cast<int64_t>(row) * p.n + col;
    float v = __ldcg(p.partials + off);
    for (int s = 1; s < p.splits; ++s) v = __fadd_rn(v, __ldcg(p.partials + s * plane + off));
    if (p.bias != nullptr) v = __fadd_rn(v, p.bias[col]);
    p.y[off] = v;
  });
  if (threadIdx.x == 0) p.counters[tile_id] = 0;  // ready for the next call
}

// The kernel family: four tile variants per size class (tuned by benchmarks/cuda_gemm_bench, checked
// to give identical bits by tests/cuda). Small m: A read as fp32, narrow tiles that stream W;
// larger m: bf16 A, wide tiles.
//                   BM   BN   BK  WM WN  ST  A_F32
using Small0 = Cfg<16, 64, 64, 1, 4, 4, true>;
using Small1 = Cfg<16, 64, 128, 1, 4, 4, true>;
using Small2 = Cfg<16, 32, 128, 1, 2, 4, true>;
using Small3 = Cfg<16, 128, 128, 1, 8, 3, true>;
// Small m on bf16 A (launch_gemm_invariant_bf16): the same tiles reading A by ldmatrix; the
// fragments hold the same bf16 values, so the MMA chain and the bits are the same.
using SmallB0 = Cfg<16, 64, 64, 1, 4, 4, false>;
using SmallB1 = Cfg<16, 64, 128, 1, 4, 4, false>;
using SmallB2 = Cfg<16, 32, 128, 1, 2, 4, false>;
using SmallB3 = Cfg<16, 128, 128, 1, 8, 3, false>;
using Mid0 = Cfg<64, 128, 32, 2, 4, 4, false>;
using Mid1 = Cfg<64, 128, 64, 2, 4, 3, false>;
using Mid2 = Cfg<64, 64, 64, 2, 2, 4, false>;
using Mid3 = Cfg<32, 128, 64, 1, 4, 4, false>;
using Large0 = Cfg<128, 128, 32, 2, 4, 4, false>;
using Large1 = Cfg<128, 128, 64, 2, 4, 3, false>;
using Large2 = Cfg<128, 128, 64, 2, 4, 4, false>;
using Large3 = Cfg<128, 64, 64, 2, 2, 3, false>;

enum class Kind { kSmall, kMid, kLarge };

// Default variants, from the benchmark's sweep on an H200 (docs/cuda.md): small m, variant 1
// (BK 128) when the shape is split, else 0 (4 blocks an SM); mid and large m, variant 1 (BK 64).
int default_variant(Kind kind, int splits) {
  if (kind == Kind::kSmall) return splits > 1 ? 1 : 0;
  return 1;
}
// Mid and large: fewer output tiles than this run a block per split (more blocks in flight).
constexpr int kMidTilesForSplitBlocks = 132;
constexpr int kLargeTilesForSplitBlocks = 66;

template <class C>
int tiles_of(int32_t m, int64_t n) {
  return static_cast<int>(((m + C::BM - 1) / C::BM) * ((n + C::BN - 1) / C::BN));
}

// The launch plan for m rows: which kernel, and whether the splits run in blocks of their own.
// Any plan gives the same bits; the choice is only about speed.
struct Plan {
  Kind kind;
  int variant;
  bool split_blocks;
};

template <class C0, class C1, class C2, class C3>
int tiles_variant(int v, int32_t m, int64_t n) {
  switch (v) {
    case 1: return tiles_of<C1>(m, n);
    case 2: return tiles_of<C2>(m, n);
    case 3: return tiles_of<C3>(m, n);
    default: return tiles_of<C0>(m, n);
  }
}

// The `bi-naive` mode's GEMM (determinism/modes.h; CudaOptions::gemm_fixed_tile): variant 4 =
// ONE tile configuration for every m — Large1, 128×128×64 — and no split blocks, as the
// published batch-invariant kernels do (Thinking Machines, vLLM, SGLang). Same bits as any
// other plan (the K order is fixed by the weight shape), slow at small m. Must equal
// kernels::kGemmVariantFixedTile (cuda_ops.h), which the ops pass as the variant.
constexpr int kVariantFixedTile = 4;

Plan plan_for(int32_t m, int64_t n, int variant, int splits) {
  if (variant == kVariantFixedTile) return Plan{Kind::kLarge, 1, false};
  Plan plan{};
  plan.kind = m <= 16 ? Kind::kSmall : m <= 256 ? Kind::kMid : Kind::kLarge;
  plan.variant = variant >= 0 && variant < 4 ? variant : default_variant(plan.kind, splits);
  const bool split = splits > 1;
  if (plan.kind == Kind::kSmall) {
    plan.split_blocks = split;  // W streams from every split at once; partials are tiny
  } else if (plan.kind == Kind::kMid) {
    plan.split_blocks =
        split && tiles_variant<Mid0, Mid1, Mid2, Mid3>(plan.variant, m, n) < kMidTilesForSplitBlocks;
  } else {
    plan.split_blocks = split && tiles_variant<Large0, Large1, Large2, Large3>(plan.variant, m, n) <
                                     kLargeTilesForSplitBlocks;
  }
  return plan;
}

template <class C>
cudaError_t run(const GemmParams& base, bool split_blocks, cudaStream_t stream) {
  GemmParams p = base;
  const int tiles_m = (p.m + C::BM - 1) / C::BM, tiles_n = (p.n + C::BN - 1) / C::BN;
  const int64_t ks = p.k / p.splits;
  p.tiles_per_split = static_cast<int32_t>((ks + C::BK - 1) / C::BK);
  p.total_tiles = p.tiles_per_split * p.splits;
  p.split_blocks = split_blocks;
  const dim3 grid(tiles_n, tiles_m, p.split_blocks ? p.splits : 1);
  constexpr int smem = C::SMEM_BYTES;
  cudaError_t err;
  if (p.splits > 1 && !p.split_blocks) {
    err = cudaFuncSetAttribute(gemm_kernel<C, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem);
    if (err != cudaSuccess) return err;
    gemm_kernel<C, true><<<grid, C::kThreads, smem, stream>>>(p);
  } else {
    err = cudaFuncSetAttribute(gemm_kernel<C, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               smem);
    if (err != cudaSuccess) return err;
    gemm_kernel<C, false><<<grid, C::kThreads, smem, stream>>>(p);
  }
  return cudaGetLastError();
}

template <class C0, class C1, class C2, class C3>
cudaError_t run_variant(int v, const GemmParams& p, bool split_blocks, cudaStream_t stream) {
  switch (v) {
    case 1: return run<C1>(p, split_blocks, stream);
    case 2: return run<C2>(p, split_blocks, stream);
    case 3: return run<C3>(p, split_blocks, stream);
    default: return run<C0>(p, split_blocks, stream);
  }
}

}  // namespace

GemmScratchNeed gemm_scratch_need(int32_t m, int64_t n, int64_t k, int variant,
                                  int splits_override) {
  GemmScratchNeed need;
  const int splits = gemm_effective_splits(n, k, splits_override);
  const Plan plan = plan_for(m, n, variant, splits);
  if (plan.kind != Kind::kSmall) need.x_bf16 = static_cast<size_t>(m) * k * 2;
  if (plan.split_blocks) {
    const int64_t tiles = (int64_t{m} + 15) / 16 * ((n + 31) / 32);  // ≥ any variant's tiles
    need.partials = static_cast<size_t>(splits) * m * n * sizeof(float);
    need.counters = static_cast<size_t>(tiles) * sizeof(int32_t);
  }
  return need;
}

namespace {

// x is fp32 (x_bf16 false: rounded here, or while loading fragments at small m) or bf16.
cudaError_t launch_gemm(const void* x, bool x_bf16, int32_t m, const uint16_t* w, int64_t n,
                        int64_t k, const float* bias, float* y, const GemmScratch& scratch,
                        int variant, int splits_override, cudaStream_t stream) {
  if (m == 0) return cudaSuccess;
  if (!gemm_shape_supported(n, k)) return cudaErrorInvalidValue;
  GemmParams p{};
  p.w = w;
  p.bias = bias;
  p.y = y;
  p.partials = scratch.partials;
  p.counters = scratch.counters;
  p.m = m;
  p.n = static_cast<int32_t>(n);
  p.k = static_cast<int32_t>(k);
  p.splits = gemm_effective_splits(n, k, splits_override);
  const Plan plan = plan_for(m, n, variant, p.splits);
  // Without split scratch the splits run inside the blocks: same bits, fewer blocks.
  const bool split_blocks = plan.split_blocks && scratch.partials && scratch.counters;
  if (plan.kind == Kind::kSmall) {
    p.a = x;
    if (x_bf16)
      return run_variant<SmallB0, SmallB1, SmallB2, SmallB3>(plan.variant, p, split_blocks, stream);
    return run_variant<Small0, Small1, Small2, Small3>(plan.variant, p, split_blocks, stream);
  }
  if (x_bf16) {
    p.a = x;
  } else {
    if (scratch.x_bf16 == nullptr) return cudaErrorInvalidValue;
    const cudaError_t err = launch_f32_to_bf16(static_cast<const float*>(x),
                                               static_cast<int64_t>(m) * k, scratch.x_bf16, stream);
    if (err != cudaSuccess) return err;
    p.a = scratch.x_bf16;
  }
  if (plan.kind == Kind::kMid)
    return run_variant<Mid0, Mid1, Mid2, Mid3>(plan.variant, p, split_blocks, stream);
  return run_variant<Large0, Large1, Large2, Large3>(plan.variant, p, split_blocks, stream);
}

}  // namespace

cudaError_t launch_gemm_invariant(const float* x, int32_t m, const uint16_t* w, int64_t n,
                                  int64_t k, const float* bias, float* y,
                                  const GemmScratch& scratch, int variant, int splits_override,
                                  cudaStream_t stream) {
  return launch_gemm(x, false, m, w, n, k, bias, y, scratch, variant, splits_override, stream);
}

cudaError_t launch_gemm_invariant_bf16(const uint16_t* x, int32_t m, const uint16_t* w, int64_t n,
                                       int64_t k, const float* bias, float* y,
                                       const GemmScratch& scratch, int variant, int splits_override,
                                       cudaStream_t stream) {
  return launch_gemm(x, true, m, w, n, k, bias, y, scratch, variant, splits_override, stream);
}

}  // namespace detllm::kernels::cuda
