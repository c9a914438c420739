// The fused ops of the model's layer (kernels/ops.h "the model's fused ops"): residual add +
// RMSNorm, q/k head norms + RoPE + KV append, and SiLU·mul over a fused gate/up row. Each
// gives the bits of the op sequence it replaces on this backend — the same per-element IEEE
// operations (pinned with __fadd_rn/__fmul_rn/…), the same row reduction (row_reduce.cuh), and
// GEMM inputs rounded to bf16 (nearest even) where the GEMM would have rounded them.
// The _fp8 forms also write the E4M3 codes and scales of their bf16 rows by the FP8 linear's
// per-token rule (fp8_row_quant.cuh), so the linear that reads them skips its quantizer.
// Test: build-cuda/tests/test_cuda --gtest_filter='CudaFused*' (tests/cuda/cuda_fused_ops_test.cpp)
// and 'CudaFp8Fused*' (tests/cuda/cuda_fp8_fused_test.cpp).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_codec.cuh"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/cuda/fp8_row_quant.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/row_reduce.cuh"

namespace detllm::kernels::cuda {
namespace {

// One block of 256 threads per row: x (+= y) then out = bf16(rmsnorm(x)). Thread i handles
// d ≡ i (mod 256) in ascending d, as rmsnorm_kernel does, so the sum of squares is the same
// chain and tree; x + y is the add kernel's one rounding. PER > 0: the row in registers
// (row_reduce.cuh), else the loop.
template <bool kAdd, int PER, bool kFp8 = false>
__global__ void __launch_bounds__(kNormThreads)
    add_rmsnorm_kernel(float* x, const float* y, const float* w, int32_t dim, float eps,
                       __nv_bfloat16* out, Fp8RowsOut q) {
  __shared__ float warp_sums[kNormWarps];
  __shared__ float warp_max[kNormWarps];
  pdl_wait();
  pdl_release();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * dim;
  float* xr = x + base;
  if constexpr (PER == 0) {
    float ss = 0.0f;
    for (int32_t d = threadIdx.x; d < dim; d += kNormThreads) {
      float v = xr[d];
      if constexpr (kAdd) {
        v = __fadd_rn(v, y[base + d]);
        xr[d] = v;
      }
      ss = __fmaf_rn(v, v, ss);
    }
    const float r = rms_scale(block_sum_squares(ss, warp_sums), dim, eps);
    float amax = 0.0f;
    for (int32_t d = threadIdx.x; d < dim; d += kNormThreads) {
      const __nv_bfloat16 b = __float2bfloat16_rn(__fmul_rn(__fmul_rn(xr[d], r), w[d]));
      out[base + d] = b;
      if constexpr (kFp8) amax = fmaxf(amax, fabsf(__bfloat162float(b)));
    }
    if constexpr (kFp8) {  // each thread reads back the elements it wrote
      const fp8::RowRule rule = fp8::row_rule(q.params);
      const float s = fp8::block_row_scale<kNormWarps>(rule, amax, warp_max);
      if (threadIdx.x == 0) q.scale[blockIdx.x] = s;
      for (int32_t d = threadIdx.x; d < dim; d += kNormThreads)
        q.codes[base + d] = fp8::row_code(__bfloat162float(out[base + d]), s);
    }
  } else {
    float v[PER], g[PER];
    load_row_regs<PER, kAdd>(xr, kAdd ? y + base : y, w, dim, v, g);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; ++j) {  // the residual stored beside regs_sum_squares' chain
      if (threadIdx.x + j * kNormThreads < dim) {
        if constexpr (kAdd) xr[threadIdx.x + j * kNormThreads] = v[j];
        ss = __fmaf_rn(v[j], v[j], ss);
      }
    }
    const float r = rms_scale(block_sum_squares(ss, warp_sums), dim, eps);
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int32_t d = threadIdx.x + j * kNormThreads;
      if (d < dim) {
        const __nv_bfloat16 b = __float2bfloat16_rn(__fmul_rn(__fmul_rn(v[j], r), g[j]));
        out[base + d] = b;
        v[j] = __bfloat162float(b);  // the GEMM input's value, kept for the codes
        if constexpr (kFp8) amax = fmaxf(amax, fabsf(v[j]));
      }
    }
    if constexpr (kFp8) {
      const fp8::RowRule rule = fp8::row_rule(q.params);
      const float s = fp8::block_row_scale<kNormWarps>(rule, amax, warp_max);
      if (threadIdx.x == 0) q.scale[blockIdx.x] = s;
#pragma unroll
      for (int j = 0; j < PER; ++j) {
        const int32_t d = threadIdx.x + j * kNormThreads;
        if (d < dim) q.codes[base + d] = fp8::row_code(v[j], s);
      }
    }
  }
}

constexpr int kHeadWarps = 4;  // heads per block of qkv_rope_append
constexpr int kMaxHeadDim = 256;

// One warp per (token, head) of the qkv row: q heads, then k heads, then v heads. A q or k head
// is (optionally) normalized with the 256-thread tree written out for one warp — element
// d = 32 e + lane plays thread d of rmsnorm_kernel, so S[e] is that kernel's warp e sum —
// then rotated pair by pair as rope_kernel does; k and v go to the cache (rounded to bf16 once
// for a bf16 cache, as kv_append_bf16 does), q to q_out.
__global__ void __launch_bounds__(kHeadWarps * 32) qkv_rope_append_kernel(const QkvRopeArgs a) {
  __shared__ float head[kHeadWarps][kMaxHeadDim];
  pdl_wait();
  pdl_release();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hh = blockIdx.y * kHeadWarps + warp;
  const int n_all = a.n_heads + 2 * a.n_kv_heads;
  if (hh >= n_all) return;
  const int t = blockIdx.x;
  const int hd = a.head_dim;
  const float* src = a.qkv + static_cast<int64_t>(t) * n_all * hd + static_cast<int64_t>(hh) * hd;
  // Every load up front — the head's elements, its slot, the position and the pairs'
  // frequencies — so they are in flight together rather than one dependent load a loop trip.
  constexpr int kE = kMaxHeadDim / 32;  // elements a lane: d = 32 e + lane
  constexpr int kP = kMaxHeadDim / 64;  // rotation pairs a lane: p = 32 i + lane
  float v[kE], freq[kP];
#pragma unroll
  for (int e = 0; e < kE; ++e) v[e] = 32 * e + lane < hd ? src[32 * e + lane] : 0.0f;
  const bool is_v = hh >= a.n_heads + a.n_kv_heads;
#pragma unroll
  for (int i = 0; i < kP; ++i)
    freq[i] = !is_v && 32 * i + lane < a.half ? a.inv_freq[32 * i + lane] : 0.0f;
  const float pos = is_v ? 0.0f : static_cast<float>(a.positions[t]);
  const int64_t slot = a.slots[t];
  const bool slot_ok = slot >= 0 && slot < a.n_slots;  // validated on the host by the scheduler
  const int64_t kv_row = static_cast<int64_t>(a.n_kv_heads) * hd;
  if (is_v) {  // v: a copy into the cache
    if (!slot_ok) return;
    const int64_t at = slot * kv_row + static_cast<int64_t>(hh - a.n_heads - a.n_kv_heads) * hd;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int d = 32 * e + lane;
      if (d >= hd) break;
      if (a.kv_fp8) {  // FP8 KV: the code of v / scale, rounded once
        const float s = a.v_scale[hh - a.n_heads - a.n_kv_heads];
        static_cast<uint8_t*>(a.cache_v)[at + d] = fp8::encode_e4m3(__fdiv_rn(v[e], s));
      } else if (a.kv_bf16) {
        static_cast<__nv_bfloat16*>(a.cache_v)[at + d] = __float2bfloat16_rn(v[e]);
      } else {
        static_cast<float*>(a.cache_v)[at + d] = v[e];
      }
    }
    return;
  }
  const bool is_q = hh < a.n_heads;
  const float* norm_w = is_q ? a.q_norm : a.k_norm;
  float* row = head[warp];
  if (norm_w != nullptr) {
    float s[kNormWarps];
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int d = 32 * e + lane;
      // Thread d's fma chain has one term (hd ≤ 256); threads past hd hold 0.
      s[e] = 32 * e < hd ? warp_butterfly_sum(d < hd ? __fmaf_rn(v[e], v[e], 0.0f) : 0.0f) : 0.0f;
    }
    const float r = rms_scale(warp_sums_total(s), hd, a.eps);
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const int d = 32 * e + lane;
      if (d < hd) row[d] = __fmul_rn(__fmul_rn(v[e], r), norm_w[d]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < kE; ++e)
      if (32 * e + lane < hd) row[32 * e + lane] = v[e];
  }
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    const int p = 32 * i + lane;
    if (p >= a.half) break;
    const float angle = __fmul_rn(pos, freq[i]);
    float sn, cs;
    sincosf(angle, &sn, &cs);
    const float x0 = row[p], x1 = row[p + a.half];
    const float y0 = __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn));
    const float y1 = __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn));
    row[p] = y0;  // lanes own disjoint pairs: no hazard within the loop
    row[p + a.half] = y1;
  }
  __syncwarp();
  if (is_q) {
    float* dst = a.q_out + (static_cast<int64_t>(t) * a.n_heads + hh) * hd;
    for (int d = lane; d < hd; d += 32) dst[d] = row[d];
    return;
  }
  if (!slot_ok) return;
  const int64_t at = slot * kv_row + static_cast<int64_t>(hh - a.n_heads) * hd;
  for (int d = lane; d < hd; d += 32) {
    if (a.kv_fp8) {
      const float s = a.k_scale[hh - a.n_heads];
      static_cast<uint8_t*>(a.cache_k)[at + d] = fp8::encode_e4m3(__fdiv_rn(row[d], s));
    } else if (a.kv_bf16) {
      static_cast<__nv_bfloat16*>(a.cache_k)[at + d] = __float2bfloat16_rn(row[d]);
    } else {
      static_cast<float*>(a.cache_k)[at + d] = row[d];
    }
  }
}

__device__ inline float silu_mul_one(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);  // as silu_mul_kernel
}

// out (n, ffn) bf16 = silu(gate) * up over gate_up (n, 2 ffn); four elements a thread.
__global__ void silu_mul_rows_x4_kernel(const float* gate_up, int32_t n, int32_t ffn,
                                        __nv_bfloat16* out) {
  pdl_wait();
  pdl_release();
  const int64_t q4 = ffn / 4;
  const int64_t total = static_cast<int64_t>(n) * q4;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / q4, c = (i % q4) * 4;
    const float4 g = *reinterpret_cast<const float4*>(gate_up + r * 2 * ffn + c);
    const float4 u = *reinterpret_cast<const float4*>(gate_up + r * 2 * ffn + ffn + c);
    const __nv_bfloat162 lo =
        __floats2bfloat162_rn(silu_mul_one(g.x, u.x), silu_mul_one(g.y, u.y));
    const __nv_bfloat162 hi =
        __floats2bfloat162_rn(silu_mul_one(g.z, u.z), silu_mul_one(g.w, u.w));
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(out + r * ffn + c);
    o[0] = lo;
    o[1] = hi;
  }
}

__global__ void silu_mul_rows_kernel(const float* gate_up, int32_t n, int32_t ffn,
                                     __nv_bfloat16* out) {
  pdl_wait();
  pdl_release();
  const int64_t total = static_cast<int64_t>(n) * ffn;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / ffn, c = i % ffn;
    out[i] = __float2bfloat16_rn(silu_mul_one(gate_up[r * 2 * ffn + c], gate_up[r * 2 * ffn + ffn + c]));
  }
}

// silu_mul_rows and the FP8 quantizer of its rows (silu_mul_rows_fp8_kernel): one block a row;
// each element's bf16 is silu_mul_rows_kernel's, the codes and scale fp8_row_quant.cuh's of
// those bf16 values.
constexpr int kSiluFp8Threads = 512;

// The row's scale from its amax by the reading matrix's rule (every thread gets it; thread 0
// stores it).
__device__ __forceinline__ float silu_fp8_row_scale(const Fp8RowsOut& q, int64_t r, float amax,
                                                    float* warp_max) {
  const float s = fp8::block_row_scale<kSiluFp8Threads / 32>(fp8::row_rule(q.params), amax,
                                                             warp_max);
  if (threadIdx.x == 0) q.scale[r] = s;
  return s;
}

// PER = 0: each thread the elements c ≡ i (mod kSiluFp8Threads), its bf16 written and read back
// for the codes (any ffn). PER > 0: the same row, four consecutive elements a thread a step
// (ffn % 4 == 0, ffn ≤ PER · 4 · kSiluFp8Threads): float4 reads of gate and up, two bf16 pairs
// written, the row's bf16 values kept in registers between the amax and the codes (no
// read-back), four codes stored as one word. Each element's bf16, the amax (a max: any order)
// and each code are the same either way, so the bits are
// (CudaFused.SiluMulRowsFp8IsSiluMulThenQuantize: ffn 1 and 100 on PER = 0, 1536 and 14336 on
// PER > 0).
template <int PER>
__global__ void __launch_bounds__(kSiluFp8Threads)
    silu_mul_rows_fp8_kernel(const float* gate_up, int32_t ffn, __nv_bfloat16* out,
                             Fp8RowsOut q) {
  __shared__ float warp_max[kSiluFp8Threads / 32];
  pdl_wait();
  pdl_release();
  const int64_t r = blockIdx.x;
  const float* g = gate_up + r * 2 * ffn;
  __nv_bfloat16* o = out + r * ffn;
  if constexpr (PER == 0) {
    float amax = 0.0f;
    for (int32_t c = threadIdx.x; c < ffn; c += kSiluFp8Threads) {
      const __nv_bfloat16 b = __float2bfloat16_rn(silu_mul_one(g[c], g[ffn + c]));
      o[c] = b;
      amax = fmaxf(amax, fabsf(__bfloat162float(b)));
    }
    const float s = silu_fp8_row_scale(q, r, amax, warp_max);
    for (int32_t c = threadIdx.x; c < ffn; c += kSiluFp8Threads)
      q.codes[r * ffn + c] = fp8::row_code(__bfloat162float(o[c]), s);
  } else {
    const int32_t groups = ffn / 4;
    __nv_bfloat162 v[PER][2];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int32_t j = threadIdx.x + i * kSiluFp8Threads;
      if (j < groups) {
        const float4 gg = *reinterpret_cast<const float4*>(g + 4 * j);
        const float4 uu = *reinterpret_cast<const float4*>(g + ffn + 4 * j);
        v[i][0] = __floats2bfloat162_rn(silu_mul_one(gg.x, uu.x), silu_mul_one(gg.y, uu.y));
        v[i][1] = __floats2bfloat162_rn(silu_mul_one(gg.z, uu.z), silu_mul_one(gg.w, uu.w));
        __nv_bfloat162* op = reinterpret_cast<__nv_bfloat162*>(o + 4 * j);
        op[0] = v[i][0];
        op[1] = v[i][1];
        amax = fmaxf(fmaxf(amax, fabsf(__low2float(v[i][0]))), fabsf(__high2float(v[i][0])));
        amax = fmaxf(fmaxf(amax, fabsf(__low2float(v[i][1]))), fabsf(__high2float(v[i][1])));
      }
    }
    const float s = silu_fp8_row_scale(q, r, amax, warp_max);
    uint32_t* codes = reinterpret_cast<uint32_t*>(q.codes + r * ffn);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int32_t j = threadIdx.x + i * kSiluFp8Threads;
      if (j < groups)
        codes[j] = uint32_t{fp8::row_code(__low2float(v[i][0]), s)} |
                   uint32_t{fp8::row_code(__high2float(v[i][0]), s)} << 8 |
                   uint32_t{fp8::row_code(__low2float(v[i][1]), s)} << 16 |
                   uint32_t{fp8::row_code(__high2float(v[i][1]), s)} << 24;
    }
  }
}

// silu_mul_rows_fp8_kernel's PER for ffn: register groups a thread, 0 (the per-element form)
// where ffn % 4 != 0 or the row is too wide.
int silu_fp8_x4_per(int32_t ffn) {
  if (ffn % 4 != 0) return 0;
  for (int per : {1, 2, 4, 8, 16})
    if (int64_t{ffn} <= int64_t{per} * 4 * kSiluFp8Threads) return per;
  return 0;
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

}  // namespace

cudaError_t launch_add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim,
                               float eps, __nv_bfloat16* out, cudaStream_t stream, bool pdl,
                               int row_regs) {
  if (n == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(n));
  return with_row_regs(row_regs, dim, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    const Fp8RowsOut none{};
    return y != nullptr ? launch_pdl(pdl, add_rmsnorm_kernel<true, kPer>, grid, kNormThreads, 0,
                                     stream, x, y, w, dim, eps, out, none)
                        : launch_pdl(pdl, add_rmsnorm_kernel<false, kPer>, grid, kNormThreads, 0,
                                     stream, x, y, w, dim, eps, out, none);
  });
}

cudaError_t launch_add_rmsnorm_fp8(float* x, const float* y, const float* w, int32_t n,
                                   int32_t dim, float eps, __nv_bfloat16* out,
                                   const Fp8RowsOut& q, cudaStream_t stream, bool pdl,
                                   int row_regs) {
  if (n == 0) return cudaSuccess;
  if (q.codes == nullptr || q.scale == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n));
  return with_row_regs(row_regs, dim, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    return y != nullptr ? launch_pdl(pdl, add_rmsnorm_kernel<true, kPer, true>, grid, kNormThreads,
                                     0, stream, x, y, w, dim, eps, out, q)
                        : launch_pdl(pdl, add_rmsnorm_kernel<false, kPer, true>, grid,
                                     kNormThreads, 0, stream, x, y, w, dim, eps, out, q);
  });
}

cudaError_t launch_silu_mul_rows_fp8(const float* gate_up, int32_t n, int32_t ffn,
                                     __nv_bfloat16* out, const Fp8RowsOut& q,
                                     cudaStream_t stream, bool pdl) {
  if (n == 0 || ffn == 0) return cudaSuccess;
  if (q.codes == nullptr || q.scale == nullptr) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(n));
  // The 16-byte reads and 4-byte stores need aligned rows: ffn % 4 == 0 and aligned bases.
  const bool aligned = reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(out) % 4 == 0 &&
                       reinterpret_cast<uintptr_t>(q.codes) % 4 == 0;
  const auto launch = [&](auto kernel) {
    return launch_pdl(pdl, kernel, grid, kSiluFp8Threads, 0, stream, gate_up, ffn, out, q);
  };
  switch (aligned ? silu_fp8_x4_per(ffn) : 0) {
    case 1: return launch(silu_mul_rows_fp8_kernel<1>);
    case 2: return launch(silu_mul_rows_fp8_kernel<2>);
    case 4: return launch(silu_mul_rows_fp8_kernel<4>);
    case 8: return launch(silu_mul_rows_fp8_kernel<8>);
    case 16: return launch(silu_mul_rows_fp8_kernel<16>);
    default:
      return launch(silu_mul_rows_fp8_kernel<0>);
  }
}

bool qkv_rope_append_supported(int32_t head_dim, int32_t rot_dim) {
  return head_dim > 0 && head_dim <= kMaxHeadDim && rot_dim % 2 == 0 && rot_dim <= head_dim;
}

cudaError_t launch_qkv_rope_append(const QkvRopeArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  if (!qkv_rope_append_supported(a.head_dim, 2 * a.half)) return cudaErrorInvalidValue;
  const int n_all = a.n_heads + 2 * a.n_kv_heads;
  const dim3 grid(static_cast<unsigned>(a.n), static_cast<unsigned>((n_all + kHeadWarps - 1) / kHeadWarps));
  return launch_pdl(a.pdl, qkv_rope_append_kernel, grid, kHeadWarps * 32, 0, stream, a);
}

cudaError_t launch_silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, __nv_bfloat16* out,
                                 cudaStream_t stream, bool pdl) {
  if (n == 0 || ffn == 0) return cudaSuccess;
  const bool vec = ffn % 4 == 0 && reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (vec) {
    return launch_pdl(pdl, silu_mul_rows_x4_kernel, grid_for(int64_t{n} * ffn / 4), 256, 0, stream,
                      gate_up, n, ffn, out);
  }
  return launch_pdl(pdl, silu_mul_rows_kernel, grid_for(int64_t{n} * ffn), 256, 0, stream, gate_up,
                    n, ffn, out);
}

}  // namespace detllm::kernels::cuda
