// The small-m GEMM's CTA-wide schedule: y (m, n) = x (m, k) · w (n, k)ᵀ (+ bias) for
// 1 ≤ m ≤ kGemvMaxM, with gemm.cu's numerics exactly — every output element's chain is
// gemv_fragments.cuh's (x as A, W as B, k16 steps ascending from zero, fp32 accumulate,
// __fadd_rn bias), so the same bits as the tiles and the warp rings (CudaGemv tests).
//
// Why another schedule: at m = 1 the verified cuBLASLt plans stream the 4096-wide layers at
// 2.8–3.1 TB/s (o, qkv) of the card's 4.3 (docs/cuda.md, "The batch-1 step's remaining levers"),
// and gemv.cu's rings of one warp each stalled at ~2 TB/s with few bytes in flight per SM.
// Here one CTA an SM (or two) owns a contiguous, balanced range of the n8 tiles of output
// features, and a producer warp streams them — W rows and x, stage by stage of BK k — through
// one ring that fills most of the SM's shared memory (up to ~200 KB in flight an SM). The
// consumer warps own NT tiles each of a pass (WARPS · NT tiles), walk the stages in order and
// release each stage to the producer on an mbarrier; a CTA with more tiles than a pass streams
// its passes back to back through the same ring.
//
// With programmatic dependent launch (pdl) the producer issues the weights of the whole ring
// before griddepcontrol.wait — weights are written by no kernel of a step — so a layer's GEMM
// streams its first ~25 MB while the small kernel before it runs; x, the bias and y are touched
// only after the wait (kernels/cuda/pdl.cuh).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemv_fragments.cuh"
#include "kernels/cuda/gemv_stream.h"
#include "kernels/cuda/mma_ptx.cuh"
#include "kernels/cuda/pdl.cuh"

namespace detllm::kernels::cuda {
namespace {

using ptx::bulk_copy_g2s;
using ptx::fence_mbarrier_init;
using ptx::fence_proxy_async_smem;
using ptx::mbarrier_arrive;
using ptx::mbarrier_arrive_expect_tx;
using ptx::mbarrier_init;
using ptx::mbarrier_wait;

struct StreamParams {
  const void* x;       // (m, k): fp32 when A_F32, else bf16
  const uint16_t* w;   // (n, k) bf16
  const float* bias;   // (n) or nullptr
  float* y;            // (m, n)
  int32_t m, n, k;
  int32_t stage_bytes;  // one ring stage: the pass's W rows, then x's m rows
  int32_t nbuf;         // stages in the ring
};

// A stage's layout, for the kernel and the host alike: the pass's W rows (rows of BK + 8 bf16:
// conflict-free ldmatrix rows), then x's rows (BK + 4 fp32 or BK + 8 bf16).
constexpr int stage_w_bytes(int warps, int nt, int bk) { return 8 * warps * nt * (bk + 8) * 2; }
constexpr int stage_x_row_bytes(int bk, bool x_f32) { return x_f32 ? (bk + 4) * 4 : (bk + 8) * 2; }

// WARPS consumer warps (+ one producer warp) of NT n8 tiles each, stages of BK k.
template <int WARPS_, int NT_, int BK_, bool A_F32_, bool M16_>
struct StreamCfg {
  static constexpr int WARPS = WARPS_, NT = NT_, BK = BK_;
  static constexpr bool A_F32 = A_F32_, M16 = M16_;
  static constexpr int THREADS = (WARPS + 1) * 32;
  static constexpr int TILES = WARPS * NT;  // n8 tiles of a pass
  static constexpr int R = 8 * TILES;       // W rows (output features) of a stage
  static constexpr int W_LD = BK + 8;
  static constexpr int X_ELEM = A_F32 ? 4 : 2;
  static constexpr int W_BYTES = stage_w_bytes(WARPS, NT, BK);
  static constexpr int X_ROW_BYTES = stage_x_row_bytes(BK, A_F32);
  static_assert(BK % 32 == 0 && W_BYTES % 16 == 0 && X_ROW_BYTES % 16 == 0, "stage layout");
};

// The CTA's share of the n8 tiles: [begin, end), contiguous and balanced (sizes differ by ≤ 1).
struct TileRange {
  int64_t begin, end;
};
__device__ __forceinline__ TileRange cta_tiles(int n) {
  const int64_t tiles = (int64_t{n} + 7) / 8;
  return {tiles * blockIdx.x / gridDim.x, tiles * (blockIdx.x + 1) / gridDim.x};
}

// Stage s's k range and rows: pass s / k_tiles, k tile s % k_tiles.
struct StageAt {
  int64_t n0;  // first output feature of the pass
  int rows;    // W rows of the pass (≤ R; rows past the CTA's range or n are not copied)
  int k0, seg;  // k range [k0, k0 + seg), seg a multiple of 8
};
template <class C>
__device__ __forceinline__ StageAt stage_at(const StreamParams& p, TileRange t, int k_tiles,
                                            int s) {
  StageAt a;
  const int pass = s / k_tiles;
  a.n0 = (t.begin + int64_t{pass} * C::TILES) * 8;
  a.rows = static_cast<int>(min(int64_t{C::R}, min(t.end * 8, int64_t{p.n}) - a.n0));
  a.k0 = (s % k_tiles) * C::BK;
  a.seg = min(C::BK, p.k - a.k0);
  return a;
}

// The producer's W part of a stage (one thread). Where k ends inside the stage's last k16 step,
// its 8 elements past k are zeroed (as gemm.cu's zero-filled tiles) before the copies, and the
// zeros are fenced for the async proxy that may later write there.
template <class C>
__device__ __forceinline__ void load_w(const StreamParams& p, unsigned char* stage, uint64_t* bar,
                                       const StageAt& a) {
  uint16_t* ws = reinterpret_cast<uint16_t*>(stage);
  if (a.seg % 16 != 0) {
    for (int r = 0; r < a.rows; ++r)
      *reinterpret_cast<uint4*>(ws + r * C::W_LD + a.seg) = make_uint4(0, 0, 0, 0);
    fence_proxy_async_smem();
  }
  const uint32_t bytes = static_cast<uint32_t>(a.seg) * 2;
  mbarrier_arrive_expect_tx(bar, a.rows * bytes);
  for (int r = 0; r < a.rows; ++r)
    bulk_copy_g2s(ws + r * C::W_LD, p.w + (a.n0 + r) * p.k + a.k0, bytes, bar);
}

// The producer's x part of a stage (one thread; after the PDL wait).
template <class C>
__device__ __forceinline__ void load_x(const StreamParams& p, unsigned char* stage, uint64_t* bar,
                                       const StageAt& a) {
  unsigned char* xs = stage + C::W_BYTES;
  if (a.seg % 16 != 0) {
    for (int r = 0; r < p.m; ++r)
      for (int b = 0; b < 8 * C::X_ELEM; b += 16)
        *reinterpret_cast<uint4*>(xs + r * C::X_ROW_BYTES + a.seg * C::X_ELEM + b) =
            make_uint4(0, 0, 0, 0);
    fence_proxy_async_smem();
  }
  const uint32_t bytes = static_cast<uint32_t>(a.seg) * C::X_ELEM;
  mbarrier_arrive_expect_tx(bar, p.m * bytes);
  const auto* xg = static_cast<const unsigned char*>(p.x);
  for (int r = 0; r < p.m; ++r)
    bulk_copy_g2s(xs + r * C::X_ROW_BYTES, xg + (int64_t{r} * p.k + a.k0) * C::X_ELEM, bytes, bar);
}

// One stage's two arrivals on its full barrier (W and x, each with its bytes); the consumers'
// WARPS arrivals on its empty barrier release it.
template <class C>
__global__ void __launch_bounds__(C::THREADS) gemv_stream_kernel(const StreamParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + int64_t{p.nbuf} * p.stage_bytes);
  uint64_t* empty = full + p.nbuf;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const TileRange t = cta_tiles(p.n);
  const int passes = static_cast<int>((t.end - t.begin + C::TILES - 1) / C::TILES);
  const int k_tiles = (p.k + C::BK - 1) / C::BK;
  const int stages = passes * k_tiles;

  if (threadIdx.x == 0) {
    for (int b = 0; b < p.nbuf; ++b) {
      mbarrier_init(full + b, 2);
      mbarrier_init(empty + b, C::WARPS);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (warp == C::WARPS) {  // the producer: one thread issues every copy
    if (lane != 0) return;
    const int first = min(p.nbuf, stages);
    for (int s = 0; s < first; ++s)
      load_w<C>(p, smem + s * p.stage_bytes, full + s, stage_at<C>(p, t, k_tiles, s));
    pdl_wait();  // x comes from the kernel before
    pdl_release();
    for (int s = 0; s < first; ++s)
      load_x<C>(p, smem + s * p.stage_bytes, full + s, stage_at<C>(p, t, k_tiles, s));
    for (int s = first; s < stages; ++s) {
      const int b = s % p.nbuf;
      mbarrier_wait(empty + b, ((s / p.nbuf) - 1) & 1);  // its previous stage is released
      const StageAt a = stage_at<C>(p, t, k_tiles, s);
      load_w<C>(p, smem + b * p.stage_bytes, full + b, a);
      load_x<C>(p, smem + b * p.stage_bytes, full + b, a);
    }
    return;
  }

  pdl_wait();  // the consumers write y and read the bias: after the kernel before
  pdl_release();
  const int k_steps = (p.k + 15) / 16;  // the last one zero-padded past k, as in gemm.cu
  const int col_end = static_cast<int>(min(t.end * 8, int64_t{p.n}));
  float acc[C::NT][4];
  for (int pass = 0; pass < passes; ++pass) {
    gemv::zero(acc);
    const int64_t tile0 = t.begin + int64_t{pass} * C::TILES + warp * C::NT;
    const bool active = tile0 < t.end;
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = pass * k_tiles + kt, b = s % p.nbuf;
      mbarrier_wait(full + b, (s / p.nbuf) & 1);
      if (active) {
        const unsigned char* stage = smem + b * p.stage_bytes;
        gemv::compute_stage<C>(
            reinterpret_cast<const uint16_t*>(stage) + warp * C::NT * 8 * C::W_LD,
            stage + C::W_BYTES, min(C::BK / 16, k_steps - kt * (C::BK / 16)), lane, p.m, acc);
      }
      __syncwarp();  // every lane is done with the stage
      if (lane == 0) mbarrier_arrive(empty + b);
    }
    // Columns past the CTA's range belong to the next CTA (NT = 2 may reach into it).
    if (active) gemv::store(acc, p.y, p.n, p.bias, p.m, col_end, static_cast<int>(tile0 * 8), lane);
  }
}

// The configurations (benchmarks/cuda_gemv_bench sweeps them; all give the same bits).
struct Shape {
  int warps, nt, bk, ctas_per_sm;
};
constexpr Shape kConfigs[kGemvStreamConfigs] = {
    {4, 1, 512, 1},  // 0: 32 features a pass, 33 KB stages, one CTA an SM
    {4, 1, 256, 1},  // 1: the same with half stages, twice as deep
    {8, 1, 256, 1},  // 2: 64 features a pass (qkv's ~6 tiles a CTA in one pass)
    {4, 1, 256, 2},  // 3: two CTAs an SM, half the ring each
    {2, 2, 512, 1},  // 4: two chains a warp, 2 consumer warps
};

constexpr int kMaxRing = 16;             // stages: more would not add bytes in flight that pay
// Shared memory a CTA may take: all of the SM's, less room for a small kernel beside it.
constexpr size_t ring_budget(int ctas_per_sm) {
  return ctas_per_sm == 1 ? size_t{220} * 1024 : size_t{108} * 1024;
}

size_t stage_bytes(const Shape& s, int32_t m, bool x_bf16) {
  return size_t(stage_w_bytes(s.warps, s.nt, s.bk)) +
         size_t(m) * stage_x_row_bytes(s.bk, !x_bf16);
}
int ring_stages(const Shape& s, int32_t m, bool x_bf16) {
  const size_t per = stage_bytes(s, m, x_bf16) + 16;  // + its two barriers
  return static_cast<int>(std::min<size_t>(kMaxRing, ring_budget(s.ctas_per_sm) / per));
}

// The device's SM count, asked once a device.
int sm_count() {
  static std::atomic<int> counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (dev >= 0 && dev < 64 && counts[dev].load() > 0) return counts[dev].load();
  int c = 0;
  if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || c < 1)
    c = 1;
  if (dev >= 0 && dev < 64) counts[dev].store(c);
  return c;
}

template <int WARPS, int NT, int BK, bool A_F32, bool M16>
cudaError_t run(StreamParams p, int ctas_per_sm, bool pdl, cudaStream_t stream) {
  using C = StreamCfg<WARPS, NT, BK, A_F32, M16>;
  const size_t smem = size_t(p.nbuf) * (p.stage_bytes + 16);
  // Once per kernel (a host call per launch costs more than a small layer's kernel).
  static const cudaError_t attr =
      cudaFuncSetAttribute(gemv_stream_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(gemv::kMaxSmem));
  if (attr != cudaSuccess) return attr;
  const int64_t tiles = (int64_t{p.n} + 7) / 8;
  const int64_t ctas = std::min<int64_t>(tiles, int64_t{sm_count()} * ctas_per_sm);
  return launch_pdl(pdl, gemv_stream_kernel<C>, dim3(static_cast<unsigned>(ctas)),
                    dim3(C::THREADS), smem, stream, p);
}

template <int I, bool A_F32, bool M16>
cudaError_t run_index(const StreamParams& p, bool pdl, cudaStream_t stream) {
  constexpr Shape s = kConfigs[I];
  return run<s.warps, s.nt, s.bk, A_F32, M16>(p, s.ctas_per_sm, pdl, stream);
}

template <bool A_F32, bool M16>
cudaError_t run_config(int config, const StreamParams& p, bool pdl, cudaStream_t stream) {
  static_assert(kGemvStreamConfigs == 5, "one case per configuration");
  switch (config) {
    case 1: return run_index<1, A_F32, M16>(p, pdl, stream);
    case 2: return run_index<2, A_F32, M16>(p, pdl, stream);
    case 3: return run_index<3, A_F32, M16>(p, pdl, stream);
    case 4: return run_index<4, A_F32, M16>(p, pdl, stream);
    default: return run_index<0, A_F32, M16>(p, pdl, stream);
  }
}

}  // namespace

bool gemv_stream_supported(int32_t m, int64_t n, int64_t k, int config, bool x_bf16) {
  if (config < 0 || config >= kGemvStreamConfigs || m < 1 || m > kGemvMaxM || n < 1 || k < 8 ||
      k % 8 != 0 || n > INT32_MAX || k > INT32_MAX)
    return false;
  return ring_stages(kConfigs[config], m, x_bf16) >= 2;
}

cudaError_t launch_gemv_stream(const void* x, bool x_bf16, int32_t m, const uint16_t* w,
                               int64_t n, int64_t k, const float* bias, float* y, int config,
                               bool pdl, cudaStream_t stream) {
  if (!gemv_stream_supported(m, n, k, config, x_bf16)) return cudaErrorInvalidValue;
  const Shape& s = kConfigs[config];
  StreamParams p{};
  p.x = x;
  p.w = w;
  p.bias = bias;
  p.y = y;
  p.m = m;
  p.n = static_cast<int32_t>(n);
  p.k = static_cast<int32_t>(k);
  p.stage_bytes = static_cast<int32_t>(stage_bytes(s, m, x_bf16));
  p.nbuf = ring_stages(s, m, x_bf16);
  const bool m16 = m > 8;
  if (x_bf16)
    return m16 ? run_config<false, true>(config, p, pdl, stream)
               : run_config<false, false>(config, p, pdl, stream);
  return m16 ? run_config<true, true>(config, p, pdl, stream)
             : run_config<true, false>(config, p, pdl, stream);
}

}  // namespace detllm::kernels::cuda
