// Paged causal attention with GQA on the GPU, one kernel for prefill and decode. Invariance by
// construction (design.md Rule 2): each (token, head) row reduces over positions 0 … pos in
// KV splits of kSplit positions aligned to absolute 0, each split in tiles of 32 aligned to
// absolute 0; lane j of the row's warp owns position tile + j: s_j = dot(q, k_j) in ascending
// head dims (fma), tile max and tile sum by a fixed 32-lane butterfly, o = o·c + Σ_j p_j v_j in
// ascending j; splits merged left to right. Every step depends only on pos and the KV values,
// so q_len, batch mix, chunking and page layout change no bit; so does where the splits run
// (all in one block, or a block each plus the merge kernel): both apply the same merge().
// Masked positions are never read. Test: build-cuda/tests/test_cuda --gtest_filter='CudaAttention*'.
#include <cmath>

#include "kernels/cuda/cuda_kernels.h"

namespace detllm::kernels::cuda {
namespace {

constexpr int kTile = 32;    // positions per tile = lanes per warp
constexpr int kSplit = 128;  // positions per KV split (part of the numerics)
static_assert(kSplit % 32 == 0, "a split is whole tiles");
constexpr int kMaxBlocksForSplit = 1024;  // (token, kv head) blocks up to this: a block per split
constexpr size_t kMaxSplitScratch = size_t(256) << 20;  // bytes of split partials at most
constexpr unsigned kFull = 0xffffffffu;

// (M, L, O) ⊕ (m, l, o): the one merge of two partial softmax states, rounding pinned.
template <int DPL>
__device__ __forceinline__ void merge(float& M, float& L, float (&O)[DPL], float m, float l,
                                      const float (&o)[DPL]) {
  const float mn = fmaxf(M, m);
  const float a = expf(__fsub_rn(M, mn));  // 0 when M = -inf (nothing merged yet)
  const float b = expf(__fsub_rn(m, mn));
  L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(l, b));
#pragma unroll
  for (int i = 0; i < DPL; ++i) O[i] = __fadd_rn(__fmul_rn(O[i], a), __fmul_rn(o[i], b));
  M = mn;
}

__device__ inline void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(smem))),
               "l"(gmem));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }

// grid (n_tokens, n_kv_heads, split_blocks ? max_splits : 1); block n_rep warps, warp w is
// query head kv_head * n_rep + w. DPL = head dims per lane (d = lane + 32 i). The block walks
// its tiles in order with the next tile's K/V copied (cp.async) while the current one is used.
template <int DPL>
__global__ void attention_kernel(const AttentionArgs a, float* partials, int max_splits,
                                 bool split_blocks) {
  extern __shared__ __align__(16) float smem[];
  const int hd = a.head_dim, ld = hd + 4;  // K rows padded: 16-byte lanes hit distinct banks
  const int n_rep = a.n_heads / a.n_kv_heads;
  float* qs = smem;                        // (n_rep, hd)
  float* kbuf = qs + n_rep * hd;           // 2 × (kTile, ld)
  float* vbuf = kbuf + 2 * kTile * ld;     // 2 × (kTile, hd)
  const int t = blockIdx.x, g = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int h = g * n_rep + warp;
  const int pos = a.positions[t];
  const int seq = a.seq_of_token[t];
  const int n_splits = pos / kSplit + 1;
  int z_begin = 0, z_end = n_splits;
  if (split_blocks) {
    z_begin = blockIdx.z;
    if (z_begin >= n_splits) return;  // whole block: this row has no such split
    z_end = z_begin + 1;
  }
  // Positions [first, last) in tiles of kTile; kSplit is a multiple of kTile, so tiles never
  // straddle a split edge and only the row's last tile is partial.
  const int first = z_begin * kSplit;
  const int last = min(z_end * kSplit, pos + 1);
  const int n_tiles = (last - first + kTile - 1) / kTile;
  const int* table = a.block_tables + static_cast<int64_t>(seq) * a.max_blocks;
  const int64_t kv_stride = static_cast<int64_t>(a.n_kv_heads) * hd;  // floats per slot
  const int hd4 = hd / 4;
  auto load_tile = [&](int buf, int start) {
    const int n_valid = min(kTile, last - start);
    float* kb = kbuf + buf * kTile * ld;
    float* vb = vbuf + buf * kTile * hd;
    for (int i = threadIdx.x; i < n_valid * hd4; i += blockDim.x) {
      const int j = i / hd4, d = (i % hd4) * 4;
      const int p = start + j;
      const int64_t slot = static_cast<int64_t>(table[p / a.block_size]) * a.block_size +
                           p % a.block_size;
      const int64_t base = slot * kv_stride + static_cast<int64_t>(g) * hd + d;
      cp_async16(kb + j * ld + d, a.k_cache + base);
      cp_async16(vb + j * hd + d, a.v_cache + base);
    }
  };
  const float* qg = a.q + (static_cast<int64_t>(t) * a.n_heads + g * n_rep) * hd;
  for (int i = threadIdx.x; i < n_rep * hd; i += blockDim.x) qs[i] = qg[i];
  const float4* q4 = reinterpret_cast<const float4*>(qs + warp * hd);
  load_tile(0, first);
  cp_async_commit();

  float M = -INFINITY, L = 0.0f, O[DPL];  // merged splits
  float m = -INFINITY, l = 0.0f, o[DPL];  // the current split
#pragma unroll
  for (int i = 0; i < DPL; ++i) O[i] = o[i] = 0.0f;

  for (int f = 0; f < n_tiles; ++f) {
    const int start = first + f * kTile;
    if (f + 1 < n_tiles) load_tile((f + 1) & 1, start + kTile);
    cp_async_commit();
    cp_async_wait1();  // this thread's copies of tile f have landed
    __syncthreads();   // everyone's have (and q is in place)
    const int n_valid = min(kTile, last - start);
    const float* kb = kbuf + (f & 1) * kTile * ld;
    const float* vb = vbuf + (f & 1) * kTile * hd;
    float sc = -INFINITY;
    if (lane < n_valid) {  // s_j = q · k_j, head dims in ascending order
      const float4* kr = reinterpret_cast<const float4*>(kb + lane * ld);
      float dot = 0.0f;
      for (int d4 = 0; d4 < hd4; ++d4) {
        const float4 kk = kr[d4], qq = q4[d4];
        dot = __fmaf_rn(qq.x, kk.x, dot);
        dot = __fmaf_rn(qq.y, kk.y, dot);
        dot = __fmaf_rn(qq.z, kk.z, dot);
        dot = __fmaf_rn(qq.w, kk.w, dot);
      }
      sc = __fmul_rn(dot, a.scale);
    }
    float mt = sc;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(kFull, mt, off));
    const float m_new = fmaxf(m, mt);
    const float pj = lane < n_valid ? expf(__fsub_rn(sc, m_new)) : 0.0f;
    float st = pj;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) st = __fadd_rn(st, __shfl_xor_sync(kFull, st, off));
    const float c = expf(__fsub_rn(m, m_new));  // 0 on the split's first tile
    l = __fadd_rn(__fmul_rn(l, c), st);
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[i] = __fmul_rn(o[i], c);
    for (int j = 0; j < n_valid; ++j) {
      const float pb = __shfl_sync(kFull, pj, j);
      const float* vr = vb + j * hd;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) o[i] = __fmaf_rn(pb, vr[d], o[i]);
      }
    }
    m = m_new;
    __syncthreads();  // buffer f & 1 is free for tile f + 2
    if ((start + kTile) % kSplit == 0 || f == n_tiles - 1) {  // the end of split z
      const int z = start / kSplit;
      if (split_blocks) {  // partial state of split z: [m, l, o (hd)]
        float* part =
            partials + ((static_cast<int64_t>(t) * a.n_heads + h) * max_splits + z) * (hd + 2);
        if (lane == 0) {
          part[0] = m;
          part[1] = l;
        }
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) part[2 + d] = o[i];
        }
        return;
      }
      merge<DPL>(M, L, O, m, l, o);
      m = -INFINITY;
      l = 0.0f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[i] = 0.0f;
    }
  }
  float* out = a.out + (static_cast<int64_t>(t) * a.n_heads + h) * hd;
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) out[d] = __fdiv_rn(O[i], L);
  }
}

// One warp per (token, head): merges the row's split partials in order 0, 1, ….
template <int DPL>
__global__ void attention_merge_kernel(const AttentionArgs a, const float* partials,
                                       int max_splits) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (row >= static_cast<int64_t>(a.n_tokens) * a.n_heads) return;
  const int lane = threadIdx.x & 31, hd = a.head_dim;
  const int t = static_cast<int>(row / a.n_heads);
  const int n_splits = a.positions[t] / kSplit + 1;
  float M = -INFINITY, L = 0.0f, O[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) O[i] = 0.0f;
  for (int z = 0; z < n_splits; ++z) {
    const float* part = partials + (row * max_splits + z) * (hd + 2);
    float o[DPL];
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = lane + 32 * i;
      o[i] = d < hd ? part[2 + d] : 0.0f;
    }
    merge<DPL>(M, L, O, part[0], part[1], o);
  }
  float* out = a.out + row * hd;
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) out[d] = __fdiv_rn(O[i], L);
  }
}

int max_splits_of(const AttentionArgs& a) {
  const int64_t max_len = static_cast<int64_t>(a.max_blocks) * a.block_size;
  return static_cast<int>((max_len + kSplit - 1) / kSplit);
}

bool use_split_blocks(const AttentionArgs& a, int force_split) {
  if (force_split >= 0) return force_split == 1;
  const size_t scratch = sizeof(float) * a.n_tokens * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
  return static_cast<int64_t>(a.n_tokens) * a.n_kv_heads <= kMaxBlocksForSplit &&
         max_splits_of(a) > 1 && scratch <= kMaxSplitScratch;
}

template <int DPL>
cudaError_t launch(const AttentionArgs& a, float* scratch, bool split, cudaStream_t stream) {
  const int n_rep = a.n_heads / a.n_kv_heads;
  const int max_splits = max_splits_of(a);
  const size_t smem = sizeof(float) * (static_cast<size_t>(n_rep) * a.head_dim +
                                       2 * kTile * (a.head_dim + 4) + 2 * kTile * a.head_dim);
  cudaError_t err = cudaFuncSetAttribute(attention_kernel<DPL>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem));
  if (err != cudaSuccess) return err;
  const dim3 grid(a.n_tokens, a.n_kv_heads, split ? max_splits : 1);
  attention_kernel<DPL><<<grid, n_rep * 32, smem, stream>>>(a, scratch, max_splits, split);
  err = cudaGetLastError();
  if (err != cudaSuccess || !split) return err;
  const int64_t rows = static_cast<int64_t>(a.n_tokens) * a.n_heads;
  attention_merge_kernel<DPL><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(
      a, scratch, max_splits);
  return cudaGetLastError();
}

}  // namespace

bool attention_head_dim_supported(int32_t head_dim) {
  return head_dim > 0 && head_dim <= 256 && head_dim % 4 == 0;
}

size_t attention_scratch_floats(const AttentionArgs& a, int force_split) {
  if (!use_split_blocks(a, force_split)) return 0;
  return static_cast<size_t>(a.n_tokens) * a.n_heads * max_splits_of(a) * (a.head_dim + 2);
}

cudaError_t launch_attention(const AttentionArgs& a, float* scratch, int force_split,
                             cudaStream_t stream) {
  if (a.n_tokens == 0) return cudaSuccess;
  if (!attention_head_dim_supported(a.head_dim) || a.n_kv_heads <= 0 ||
      a.n_heads % a.n_kv_heads != 0 || a.n_heads / a.n_kv_heads > 32)
    return cudaErrorInvalidValue;
  const bool split = use_split_blocks(a, force_split);
  if (split && scratch == nullptr) return cudaErrorInvalidValue;
  if (a.head_dim <= 32) return launch<1>(a, scratch, split, stream);
  if (a.head_dim <= 64) return launch<2>(a, scratch, split, stream);
  if (a.head_dim <= 128) return launch<4>(a, scratch, split, stream);
  return launch<8>(a, scratch, split, stream);
}

}  // namespace detllm::kernels::cuda
