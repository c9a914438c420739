// The PTX the tensor-core kernels share (gemm.cu, the attention_tc*.cu schedules):
// shared-memory addresses, cp.async copies, ldmatrix, the bf16 m16n8k16 MMA and the bf16 pair
// rounding. One definition each, so every kernel issues the same instruction for the same
// arithmetic (the GEMM's bits rest on all its schedules running the same MMA on the same
// fragments).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace detllm::kernels::cuda::ptx {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy global → shared.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
// The same, reading src_bytes (0 or 16) and writing zeros for the rest (out-of-range rows and
// columns: gmem must still be a valid address).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)),
               "l"(gmem), "r"(src_bytes));
}
// 8-byte async copy global → shared (through L1: .cg takes 16 bytes only), reading src_bytes
// (0 or 8) and writing zeros for the rest. The FP8 KV cache's row pieces (8 codes).
__device__ __forceinline__ void cp_async8_zfill(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(smem)),
               "l"(gmem), "r"(src_bytes));
}
// The same with an L2 prefetch size (PREFETCH 128: the L2 fetches the aligned 128 bytes around
// the 16 from memory at once; 0: no hint, as above). Same data.
template <int PREFETCH>
__device__ __forceinline__ void cp_async16_zfill_prefetch(void* smem, const void* gmem,
                                                          int src_bytes) {
  static_assert(PREFETCH == 0 || PREFETCH == 128, "an L2 prefetch size: 0 or 128");
  if constexpr (PREFETCH == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)),
                 "l"(gmem), "r"(src_bytes));
  } else {
    cp_async16_zfill(smem, gmem, src_bytes);
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- bulk copies (TMA, 1-D) completing on an mbarrier -----------------------------------
// The barrier at `bar` (8 bytes of shared memory), for `count` arrivals.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
// Makes initialised barriers visible to the async proxy (the bulk copies).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` more of transactions in the current phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
// One arrival (no transactions): a consumer's release of a ring stage.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  }
}
// bytes (a multiple of 16; both addresses 16-byte aligned) global → shared by the TMA unit,
// counted on `bar` when they land.
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, uint32_t bytes,
                                              uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(smem)),
      "l"(gmem), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// d (16×8 fp32) += a (16×16 bf16, row) · b (16×8 bf16, col).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The transpose of an 8×8 matrix of b16 across the warp: lane i holds row i / 4, columns
// 2·(i % 4) and + 1 (low, high half) before and after. A move: every bit is kept.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// Two floats as bf16 (round to nearest even), lo in the low half (the lower column index).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- warpgroup MMA (wgmma, sm_90a) -------------------------------------------------------
// A 64-bit shared-memory matrix descriptor of a 128-byte-swizzled operand: rows of 128 bytes
// whose 16-byte chunks are XORed with (row % 8), in atoms of 8 rows (1024 bytes, 1024-aligned);
// the start address may move by 32 bytes inside an atom's row (a k16 step of a K-major
// operand). Both byte offsets are 1024 (the next 8-row group), so the descriptor reads one
// 64-element-wide atom column (N = 64), whatever the major-ness.
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  constexpr uint64_t kGroup = 1024 >> 4;
  return (uint64_t{(smem_addr & 0x3FFFF) >> 4}) | (kGroup << 16) | (kGroup << 32) |
         (uint64_t{1} << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait0() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Pins the accumulators of in-flight warpgroup MMAs in program order: the compiler sees the wgmma
// asm as producing them at issue, so without this it may move their readers (or writers) across
// wgmma_wait0 / wgmma_fence. Call it on every accumulator before the fence and after the wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}
// Makes this thread's generic-proxy writes to shared memory (cp.async, stores) visible to the
// async proxy (wgmma reads its B operand through it).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// The 32 fp32 accumulator operands of an m64n64 wgmma, d[j][e] = register 4j + e (the asm's
// %0…%31), and their place in the instruction, for the two forms below.
#define DETLLM_WGMMA_D32_REGS                                                   \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                     \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, "
#define DETLLM_WGMMA_D32(d)        \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

// d (64×64 fp32 over the warpgroup; per warp its 16 rows in the m16n8 C layout, d[j] = n8
// tile j) += a (64×16 bf16 from registers, per warp the m16n8k16 A fragment of its 16 rows) ·
// b (16×64 bf16 at descriptor `b`; TRANS_B = 0: K-major, 1: N-major). Every warp of the
// warpgroup must issue it (after wgmma_fence; complete at wgmma_wait0).
template <int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[8][4], const uint32_t (&a)[4],
                                                   uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      DETLLM_WGMMA_D32_REGS
      "{%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : DETLLM_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS_B), "r"(1));
}

// The same with A (64×16 bf16, K-major) from shared memory at descriptor `a` too (the SS form:
// no register operand is read asynchronously).
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      DETLLM_WGMMA_D32_REGS
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : DETLLM_WGMMA_D32(d)
      : "l"(a), "l"(b), "r"(1));
}

#undef DETLLM_WGMMA_D32
#undef DETLLM_WGMMA_D32_REGS

}  // namespace detllm::kernels::cuda::ptx
