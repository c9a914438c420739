// Small-m schedule of the invariant GEMM ("GEMV"): y (m, n) = x (m, k) · w (n, k)ᵀ (+ bias) for
// 1 ≤ m ≤ kGemvMaxM, with gemm.cu's numerics exactly. For each output element: x rounded to
// bf16, one chain of mma.sync.m16n8k16 steps over k in ascending order from zero — x as the A
// operand (16 rows, rows ≥ m zero), W as B (8 output features) — fp32 accumulate, then
// + bias (__fadd_rn). That is gemm.cu's instruction on the same fragments in the same order, so
// the same bits (tests/cuda/cuda_gemm_invariance_test.cpp checks every config against it).
//
// Only the schedule differs, for bandwidth at small m, where the whole cost is streaming W:
// gemm.cu's small tiles give one CTA per 32–128 output features, so a 4096-wide projection
// has 32–128 CTAs for 132 SMs and each streams its weights behind a CTA-wide barrier. Here
// one warp owns 8 (or 16) output features and the whole K range, and streams its own W rows
// (and x) through a private ring of NBUF stages — no CTA barrier, so 512 warps for a 4096-wide
// layer, each with NBUF − 1 stages in flight. The stages are bulk copies (TMA, one per row
// segment) completing on one mbarrier per stage: a first version with 16-byte cp.async
// streamed at 1.8–3.1 TB/s (the outstanding-request limit of the load path; cuBLASLt's TMA
// kernels reach 4.1 TB/s on the same card).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemv_fragments.cuh"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/mma_ptx.cuh"

namespace detllm::kernels::cuda {
namespace {

using ptx::bulk_copy_g2s;
using ptx::fence_mbarrier_init;
using ptx::mbarrier_arrive_expect_tx;
using ptx::mbarrier_init;
using ptx::mbarrier_wait;

struct GemvParams {
  const void* x;       // (m, k): fp32 when A_F32, else bf16
  const uint16_t* w;   // (n, k) bf16
  const float* bias;   // (n) or nullptr
  float* y;            // (m, n)
  int32_t m, n, k;
  int32_t stage_bytes;  // one ring stage of one warp: W rows, then x rows
};

// NT n8 tiles of output features per warp, BK k per stage, NBUF stages per warp's ring, WARPS
// warps per CTA; A_F32: x is fp32 (rounded to bf16 while building fragments); M16: m > 8
// (the A fragment's rows 8…15 are read too).
template <int NT_, int BK_, int NBUF_, int WARPS_, bool A_F32_, bool M16_>
struct GemvCfg {
  static constexpr int NT = NT_, BK = BK_, NBUF = NBUF_, WARPS = WARPS_;
  static constexpr bool A_F32 = A_F32_, M16 = M16_;
  static constexpr int R = 8 * NT;       // W rows (output features) per warp
  static constexpr int W_LD = BK + 8;    // bf16 elements: conflict-free ldmatrix rows
  static constexpr int X_LD = A_F32 ? BK + 4 : BK + 8;  // x elements per smem row
  static constexpr int X_ELEM = A_F32 ? 4 : 2;          // bytes
  static constexpr int W_BYTES = R * W_LD * 2;
  static constexpr int X_ROW_BYTES = X_LD * X_ELEM;
  static_assert(BK % 32 == 0 && W_BYTES % 16 == 0 && X_ROW_BYTES % 16 == 0, "stage layout");
  static constexpr int stage_bytes(int m) { return W_BYTES + m * X_ROW_BYTES; }
};

// Stage k0…k0 + BK of the warp's W rows n0… and of x's m rows: lane 0 issues one bulk copy per
// row segment, all counted on `bar`. Rows past n are not copied (their outputs are not stored,
// and an output column depends on its own W row only). Where k ends inside the stage's last
// k16 step, its 8 elements past k are zeroed in W and x (as gemm.cu's zero-filled tiles).
template <class C>
__device__ __forceinline__ void load_stage(const GemvParams& p, unsigned char* stage,
                                           uint64_t* bar, int n0, int k0, int lane) {
  const int seg = min(C::BK, p.k - k0);  // elements per row, a multiple of 8
  const int rows = min(C::R, p.n - n0);
  uint16_t* ws = reinterpret_cast<uint16_t*>(stage);
  unsigned char* xs = stage + C::W_BYTES;
  if (seg % 16 != 0) {
    if (lane < C::R) *reinterpret_cast<uint4*>(ws + lane * C::W_LD + seg) = make_uint4(0, 0, 0, 0);
    for (int r = lane; r < p.m; r += 32)
      for (int b = 0; b < 8 * C::X_ELEM; b += 16)
        *reinterpret_cast<uint4*>(xs + r * C::X_ROW_BYTES + seg * C::X_ELEM + b) =
            make_uint4(0, 0, 0, 0);
  }
  if (lane == 0) {
    const uint32_t w_bytes = seg * 2, x_bytes = seg * C::X_ELEM;
    mbarrier_arrive_expect_tx(bar, rows * w_bytes + p.m * x_bytes);
    for (int r = 0; r < rows; ++r)
      bulk_copy_g2s(ws + r * C::W_LD, p.w + int64_t{n0 + r} * p.k + k0, w_bytes, bar);
    const auto* xg = static_cast<const unsigned char*>(p.x);
    for (int r = 0; r < p.m; ++r)
      bulk_copy_g2s(xs + r * C::X_ROW_BYTES, xg + (int64_t{r} * p.k + k0) * C::X_ELEM, x_bytes,
                    bar);
  }
}

template <class C>
__global__ void __launch_bounds__(C::WARPS * 32) gemv_kernel(const GemvParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = (blockIdx.x * C::WARPS + warp) * C::R;
  if (n0 >= p.n) return;  // no CTA-wide barrier below: a warp may leave alone
  unsigned char* ring = smem + warp * C::NBUF * p.stage_bytes;
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(smem + C::WARPS * C::NBUF * p.stage_bytes) + warp * C::NBUF;
  const int tiles = (p.k + C::BK - 1) / C::BK;
  const int k_steps = (p.k + 15) / 16;  // the last one zero-padded past k, as in gemm.cu

  if (lane == 0) {
    for (int b = 0; b < C::NBUF; ++b) mbarrier_init(bars + b, 1);
    fence_mbarrier_init();
  }
  __syncwarp();

  float acc[C::NT][4];
  gemv::zero(acc);

#pragma unroll
  for (int s = 0; s < C::NBUF - 1; ++s)
    if (s < tiles) load_stage<C>(p, ring + s * p.stage_bytes, bars + s, n0, s * C::BK, lane);
  for (int t = 0; t < tiles; ++t) {
    const int b = t % C::NBUF;
    mbarrier_wait(bars + b, (t / C::NBUF) & 1);
    __syncwarp();  // every lane is past stage t − 1, whose buffer is refilled next
    const int next = t + C::NBUF - 1;
    if (next < tiles) {
      const int nb = next % C::NBUF;
      load_stage<C>(p, ring + nb * p.stage_bytes, bars + nb, n0, next * C::BK, lane);
    }
    const unsigned char* stage = ring + b * p.stage_bytes;
    gemv::compute_stage<C>(reinterpret_cast<const uint16_t*>(stage), stage + C::W_BYTES,
                           min(C::BK / 16, k_steps - t * (C::BK / 16)), lane, p.m, acc);
  }

  gemv::store(acc, p.y, p.n, p.bias, p.m, p.n, n0, lane);
}

// The configurations (benchmarks/cuda_gemv_bench sweeps them; all give the same bits).
struct Shape {
  int nt, bk, nbuf, warps;
};
constexpr Shape kConfigs[kGemvWarpConfigs] = {
    {1, 256, 4, 4},  // 0: 8 features a warp, 3 stages of 4 KB in flight
    {2, 256, 3, 4},  // 1: 16 features a warp (two chains), 2 stages of 8 KB in flight
    {1, 256, 6, 4},  // 2: a deeper ring, 5 stages in flight
    {1, 256, 4, 2},  // 3: 2 warps a CTA (more CTAs for narrow layers)
    {1, 512, 3, 4},  // 4: larger stages, 2 of 8 KB in flight
    {2, 128, 6, 4},  // 5: 16 features a warp, 5 stages of 4 KB in flight
};


template <int NT, int BK, int NBUF, int WARPS, bool A_F32, bool M16>
cudaError_t run(const GemvParams& base, cudaStream_t stream) {
  using C = GemvCfg<NT, BK, NBUF, WARPS, A_F32, M16>;
  GemvParams p = base;
  p.stage_bytes = C::stage_bytes(p.m);
  const int smem = C::WARPS * C::NBUF * (p.stage_bytes + 8);
  // Once per kernel (a host call per launch costs more than a small layer's kernel).
  static const cudaError_t attr = cudaFuncSetAttribute(
      gemv_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(gemv::kMaxSmem));
  if (attr != cudaSuccess) return attr;
  const int64_t features_per_cta = int64_t{C::WARPS} * C::R;
  const dim3 grid(static_cast<unsigned>((p.n + features_per_cta - 1) / features_per_cta));
  gemv_kernel<C><<<grid, C::WARPS * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int I, bool A_F32, bool M16>
cudaError_t run_index(const GemvParams& p, cudaStream_t stream) {
  constexpr Shape s = kConfigs[I];
  return run<s.nt, s.bk, s.nbuf, s.warps, A_F32, M16>(p, stream);
}

template <bool A_F32, bool M16>
cudaError_t run_config(int config, const GemvParams& p, cudaStream_t stream) {
  static_assert(kGemvWarpConfigs == 6, "one case per configuration");
  switch (config) {
    case 1: return run_index<1, A_F32, M16>(p, stream);
    case 2: return run_index<2, A_F32, M16>(p, stream);
    case 3: return run_index<3, A_F32, M16>(p, stream);
    case 4: return run_index<4, A_F32, M16>(p, stream);
    case 5: return run_index<5, A_F32, M16>(p, stream);
    default: return run_index<0, A_F32, M16>(p, stream);
  }
}

size_t smem_bytes(int config, int32_t m, bool x_bf16) {
  const Shape& s = kConfigs[config];
  const size_t x_row = x_bf16 ? size_t(s.bk + 8) * 2 : size_t(s.bk + 4) * 4;
  const size_t stage = size_t(8 * s.nt) * (s.bk + 8) * 2 + size_t(m) * x_row;
  return size_t(s.warps) * s.nbuf * (stage + 8);  // + its mbarrier
}

}  // namespace

int gemv_default_config(int32_t m, int64_t n) {
  (void)m;
  (void)n;
  return 0;
}

bool gemv_supported(int32_t m, int64_t n, int64_t k, int config, bool x_bf16) {
  if (m < 1 || m > kGemvMaxM || !gemm_shape_supported(n, k) || n > INT32_MAX || k > INT32_MAX)
    return false;
  if (config < 0) config = gemv_default_config(m, n);
  if (config >= kGemvWarpConfigs)
    return gemv_stream_supported(m, n, k, config - kGemvWarpConfigs, x_bf16);
  return smem_bytes(config, m, x_bf16) <= gemv::kMaxSmem;
}

cudaError_t launch_gemv(const void* x, bool x_bf16, int32_t m, const uint16_t* w, int64_t n,
                        int64_t k, const float* bias, float* y, int config, bool pdl,
                        cudaStream_t stream) {
  if (config < 0) config = gemv_default_config(m, n);
  if (!gemv_supported(m, n, k, config, x_bf16)) return cudaErrorInvalidValue;
  if (config >= kGemvWarpConfigs)
    return launch_gemv_stream(x, x_bf16, m, w, n, k, bias, y, config - kGemvWarpConfigs, pdl,
                              stream);
  GemvParams p{};
  p.x = x;
  p.w = w;
  p.bias = bias;
  p.y = y;
  p.m = m;
  p.n = static_cast<int32_t>(n);
  p.k = static_cast<int32_t>(k);
  const bool m16 = m > 8;
  if (x_bf16) return m16 ? run_config<false, true>(config, p, stream) : run_config<false, false>(config, p, stream);
  return m16 ? run_config<true, true>(config, p, stream) : run_config<true, false>(config, p, stream);
}

}  // namespace detllm::kernels::cuda
