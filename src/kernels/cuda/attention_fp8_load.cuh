// The FP8 KV cache's load into the tensor-core attention's bf16 tiles (the packed CTA,
// attention_tc_kernel.cuh with KV8; the decode warps' rings dequantize with dequant8 too,
// attention_tc_decode_warp.cuh): 8 E4M3 codes of a cache row, each dequantized and rounded
// once, bf16(dec(code) · scale) — dec exact, one fp32 product, one round to nearest even — into
// the 8 bf16 of the tile row that the bf16 cache's 16-byte cp.async would have filled. So the
// tile holds a function of the codes alone and every later step (Q·Kᵀ, softmax, P·V, the splits
// and their merge) is the bf16 cache's, in the same order: the invariance argument carries over.
// The load is synchronous (plain global loads and shared stores, ordered by the kernel's
// __syncthreads): the copy overlaps less than cp.async, no sum changes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/fp8_codec.cuh"

namespace detllm::kernels::cuda::tc {

// 8 E4M3 codes (raw.x: the lower four, low byte first) as 8 bf16, each bf16(dec(code) · scale):
// one fp32 product, one round to nearest even. The one dequantization of every FP8 KV load.
__device__ __forceinline__ uint4 dequant8(uint2 raw, float scale) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? raw.x : raw.y;
    const int sh = (i & 1) * 16;
    const float lo = __fmul_rn(fp8::decode_e4m3(static_cast<uint8_t>(word >> sh)), scale);
    const float hi = __fmul_rn(fp8::decode_e4m3(static_cast<uint8_t>(word >> (sh + 8))), scale);
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // .x = lo (lower address)
    out[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// dst: 8 bf16 (16-byte aligned) of a tile row; src: the row's codes at this head and column
// (8-byte aligned), slot s at src + s · row_elems; slot < 0: zeros (past the range: never the
// cache).
__device__ __forceinline__ void load_fp8_chunk(__nv_bfloat16* dst, const uint8_t* src, int slot,
                                               uint32_t row_elems, float scale) {
  uint2 raw = make_uint2(0u, 0u);
  if (slot >= 0) raw = *reinterpret_cast<const uint2*>(src + static_cast<uint64_t>(slot) * row_elems);
  *reinterpret_cast<uint4*>(dst) = dequant8(raw, scale);
}

}  // namespace detllm::kernels::cuda::tc
