// The one backend interface. Every backend (ref/: plain scalar code, cpu/: threaded SIMD,
// cuda/: one Hopper GPU, docs/cuda.md) implements these ops with the same signatures and the
// same layouts.
// Invariance contract (design.md Rule 1/2): the floating-point reduction order of every output
// element depends only on the weight shape and the token's absolute position — never on how
// many tokens are in the step, which sequences they belong to, or the number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "determinism/policy.h"

namespace detllm {
struct SampleRowParams;  // kernels/sampling/sample_row.h
struct SampleRowResult;
struct RowMasks;
struct LogitPenalty;  // kernels/sampling/logit_penalties.h
}  // namespace detllm

namespace detllm::kernels {

// A weight matrix, row-major: (rows = out_features N, cols = in_features K). A block dtype
// (core/dtype.h) stores each row as cols / dtype_block_elems blocks, rows back to back.
struct WeightMatrix {
  const void* data = nullptr;  // (rows, cols) of dtype
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Rotary embedding frequencies (already scaled, e.g. llama3 rope scaling), shared by all tokens.
// Angle of pair i at position p is float(p) * inv_freq[i], computed in fp32.
struct RopeTable {
  std::vector<float> inv_freq;  // (rot_dim / 2)
  int32_t rot_dim = 0;          // rotated leading dims of each head (== head_dim for Llama)
};

// Paged KV cache of one layer. A slot is block * block_size + offset.
//   k, v: [n_blocks, block_size, n_kv_heads, head_dim] of dtype (Ops::kv_dtype(): fp32 on the
//   CPU backends; bf16 by default on CUDA, where kv_append rounds each value once)
struct KvCacheLayer {
  void* k = nullptr;
  void* v = nullptr;
  int32_t n_blocks = 0;
  int32_t block_size = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kF32;
  // FP8 KV (Ops::kv_fp8(), docs/models.md "FP8 KV cache"): the scales of each KV head
  // (n_kv_heads each), fixed at load; kv_append stores k = dec(e4m3(k / s)) · s — the value an
  // E4M3 pool with that scale decodes to — so K/V are rounded once, when appended, and cached
  // and fresh KV are the same bits. nullptr: stored as given.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // The pools as fp32 (the CPU backends' only KV dtype); throws when they are not fp32.
  float* k_f32() const;
  float* v_f32() const;
};

class GraphCapture;

// Metadata of one forward step: n_tokens tokens drawn from n_seqs sequences, in any order and
// mix (prefill chunks and decode tokens together; there is no separate prefill/decode path).
//
//   token t ──seq_of_token[t]──▶ s ──block_tables[s * max_blocks + j]──▶ physical block
//   token t attends to positions 0 … positions[t] of its sequence; position j of sequence s
//   lives at slot block_tables[s * max_blocks + j / block_size] * block_size + j % block_size.
// All KV of positions < positions[t] must already be in the cache; kv_append writes this
// step's KV before attention reads it, so cached and fresh KV are the same bits.
struct StepBatch {
  int32_t n_tokens = 0;
  const int32_t* positions = nullptr;     // (n_tokens) absolute position in its sequence
  const int32_t* seq_of_token = nullptr;  // (n_tokens) row of block_tables
  const int32_t* slots = nullptr;         // (n_tokens) KV slot this token's K/V is written to
  int32_t n_seqs = 0;
  int32_t max_blocks = 0;                 // row length of block_tables
  const int32_t* block_tables = nullptr;  // (n_seqs, max_blocks) physical block ids
  // The step's GEMM numerics (determinism/modes.h: the engine's step class, the verified mode's
  // per-step choice): the model passes it to every matmul of the step.
  NumericsMode numerics = NumericsMode::kInvariant;
};

// Every pointer an op takes lives in the backend's memory (host memory for the CPU backends,
// GPU memory for CUDA), allocated through the memory functions below. The defaults are host
// memory; a device backend overrides them. The model code uses only these, so it runs
// unchanged on every backend.
class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string_view name() const = 0;

  // ---- memory -------------------------------------------------------------------------
  // True when backend memory is host memory, so host tensors can be used in place.
  virtual bool host_memory() const { return true; }
  // The dtype the backend wants weights in (upload_weight converts to it).
  virtual DType weight_dtype() const { return DType::kF32; }
  // True when matmul and embedding read weights of dtype t as they are (host backends: every
  // DType, block types decoded in registers with the bits of core/quant.h), so the model
  // places them without conversion.
  virtual bool reads_weight_dtype(DType t) const { return t == weight_dtype(); }
  // The dtype of the KV cache (KvStorage allocates it; kv_append converts to it). A numerics
  // setting: it is in the fingerprint (cli/backend.cpp). CPU backends: fp32 only.
  virtual DType kv_dtype() const { return DType::kF32; }
  // True when K/V are rounded to E4M3 on append (--kv-dtype fp8): the model then passes each
  // layer's per-head scales in KvCacheLayer (kernels/ref/fp8_linear.h fp8_kv_round).
  virtual bool kv_fp8() const { return false; }
  // Free bytes of the backend's device memory now (sizes the KV pool from memory, as
  // EngineConfig::gpu_memory_fraction says); 0 for host-memory backends.
  virtual size_t device_memory_free() const { return 0; }
  virtual void* alloc_bytes(size_t n_bytes);  // 64-byte aligned, zeroed; nullptr for 0 bytes
  virtual void free_bytes(void* p);
  virtual void upload(void* dst, const void* src_host, size_t n_bytes);    // host → backend
  virtual void download(void* dst_host, const void* src, size_t n_bytes);  // backend → host
  virtual void copy(void* dst, const void* src, size_t n_bytes);           // backend → backend
  // rows × row_bytes, backend → backend, from rows src_pitch bytes apart to rows dst_pitch apart
  // (a column range of a row-major matrix: tensor parallelism's K chunks). The default copies
  // row by row through copy(); CUDA does it in one cudaMemcpy2DAsync.
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t row_bytes, int64_t rows);
  // Waits for queued work (no-op on the CPU).
  virtual void synchronize() {}
  // Makes the calling thread ready to queue this ops object's work (CUDA: selects its device,
  // which is per thread). Tensor-parallel ranks call it on their worker threads. No-op on the CPU.
  virtual void bind_thread() {}
  // dst (n) of dtype (f32, or bf16 rounded to nearest even from the f32 value) = synthetic
  // weights generated in place: dst[i] = synthetic_value(key, i, center, scale)
  // (kernels/synthetic_values.h). Every backend gives the same bits, so a model generated in
  // device memory equals the host-generated one uploaded (no host copy of 8B weights).
  virtual void fill_uniform(void* dst, DType dtype, int64_t n, uint64_t key, float center,
                            float scale);

  // ---- ops ----------------------------------------------------------------------------

  // out (n, table.cols) = table[ids[i], :]; table (vocab, dim).
  virtual void embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) = 0;

  // out (n, dim) = x / sqrt(mean(x²) + eps) * w; x (n, dim), w (dim). out may alias x.
  virtual void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
                       float* out) = 0;

  // y (m, w.rows) = x (m, w.cols) · wᵀ (+ bias (w.rows) when bias != nullptr).
  // The K-reduction order of y[i, j] is fixed by (w.rows, w.cols) alone. numerics: the step's
  // GEMM numerics (StepBatch::numerics; gemm_numerics() below says what runs): kInvariant (the
  // batch-invariant GEMM) or kFast (library heuristics) on the SAME weights. Host backends
  // ignore it (their kernels are invariant by construction).
  virtual void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias,
                      float* y, NumericsMode numerics = NumericsMode::kInvariant) = 0;

  // In place on x (n, n_heads, head_dim): half-split (HF "rotate_half") rotation of the first
  // rot_dim dims of each head, pairing d and d + rot_dim/2, by the angle of positions[t].
  virtual void rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim,
                    const int32_t* positions, const RopeTable& table) = 0;

  // Writes k, v (n_tokens, n_kv_heads, head_dim) into cache slots batch.slots.
  virtual void kv_append(const float* k, const float* v, const StepBatch& batch,
                         const KvCacheLayer& cache) = 0;

  // Causal attention over the paged cache with GQA (n_heads % n_kv_heads == 0; query head h
  // reads kv head h / (n_heads / n_kv_heads)). q, out: (n_tokens, n_heads, head_dim).
  // Each (token, head) row reduces over positions 0 … positions[t] in ascending order.
  virtual void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                         int32_t n_heads, float scale, float* out) = 0;

  // out[i] = silu(gate[i]) * up[i] for i < n.
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;

  // x[i] += y[i] for i < n (residual).
  virtual void add(float* x, const float* y, int64_t n) = 0;

  // out (n_rows, dim) = x[rows[r], :] — gathers the rows whose logits are wanted.
  virtual void gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                           float* out);

  // ---- the model's fused ops (LlamaModel's layer: docs/cuda.md "Rounding points") --------
  // Each is specified as the sequence of the ops above that it replaces and gives the same
  // bits. The defaults run exactly that sequence (through this object's virtual ops, on host
  // scratch: for backends whose memory the host can address and whose GEMM inputs are fp32);
  // the CUDA backend fuses each into one kernel.
  //
  // GEMM inputs (matmul_rounded's x, written by add_rmsnorm, attention_rounded and
  // silu_mul_rows) are in gemm_input_dtype(). CUDA: bf16, the dtype each of its GEMMs rounds x
  // to (nearest even) anyway, so a producer that writes bf16 hands the GEMM the very bits it
  // would have made from the fp32 tensor. Host backends: fp32 (nothing is rounded).
  virtual DType gemm_input_dtype() const { return DType::kF32; }

  // y (m rows of stride ldy >= w.rows): columns [0, w.rows) = x · wᵀ (+ bias), the others
  // untouched; x (m, w.cols) in gemm_input_dtype(). = matmul() of the fp32 tensor x rounds
  // from, into those columns (one part of a fused projection, or the whole of it), with the
  // same numerics.
  virtual void matmul_rounded(const void* x, int32_t m, const WeightMatrix& w, const float* bias,
                              float* y, int64_t ldy,
                              NumericsMode numerics = NumericsMode::kInvariant);

  // Names the weight matrix whose linear reads the GEMM input that the next producer op
  // (add_rmsnorm, silu_mul_rows) writes to `out`. A backend whose linear for `reader`'s dtype
  // quantizes its input (CUDA's FP8 linear, per token) may have that producer write the
  // quantized form as well and the linears of `reader`'s rule on `out` read it instead: the
  // same bits, a launch fewer. The caller's part: nothing else writes `out` between the
  // producer and those linears. Default: nothing.
  virtual void announce_gemm_input(const void* out, const WeightMatrix& reader) {
    (void)out;
    (void)reader;
  }

  // The residual and the next norm: x (n, dim) += y (skipped when y is nullptr), then
  // out (n, dim) in gemm_input_dtype() = rmsnorm(x, w). = add(); rmsnorm().
  virtual void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim,
                           float eps, void* out);

  // After the fused q/k/v projection. qkv (n, (n_heads + 2 n_kv) head_dim) fp32, each row the
  // token's q heads, then k heads, then v heads (n_kv, head_dim from cache). Per token: q and k
  // heads RMSNorm-ed with q_norm / k_norm (each (head_dim); both nullptr for models without),
  // RoPE on q and k at positions[t], k and v written to KV slot batch.slots[t], q to q_out
  // (n, n_heads, head_dim) fp32. = rmsnorm() per head, rope() and kv_append() on q, k, v apart.
  virtual void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                               const float* k_norm, float eps, const RopeTable& table,
                               const StepBatch& batch, const KvCacheLayer& cache, float* q_out);

  // attention() with out (n_tokens, n_heads, head_dim) in gemm_input_dtype().
  virtual void attention_rounded(const float* q, const KvCacheLayer& cache,
                                 const StepBatch& batch, int32_t n_heads, float scale, void* out);

  // After the fused gate/up projection: gate_up (n, 2 ffn), each row gate then up;
  // out (n, ffn) in gemm_input_dtype() = silu(gate) * up. = silu_mul() on the halves.
  virtual void silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out);

  // ---- mixture of experts (model/moe_ffn.h; host defaults: kernels/moe.cpp, reference:
  // kernels/ref/moe_ref.h) ----------------------------------------------------------------
  // Routing, per token, from its own row alone. logits (n, n_experts) fp32; experts (n, k) the
  // k experts of the highest logits, highest first, equal logits in ascending expert index (a
  // NaN logit ranks as -inf); weights (n, k) fp32: each chosen expert's softmax probability
  // over all n_experts, or with `renormalize` the softmax over the k chosen logits (the same
  // as the chosen probabilities divided by their sum). exp and sums in double with our own exp
  // (kernels/sampling/sampler_math.h), each weight rounded once to fp32. All pointers are in
  // backend memory.
  virtual void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k,
                         bool renormalize, int32_t* experts, float* weights);

  // gather_rows() of rows in gemm_input_dtype(): out (n_rows, dim) = x[rows[r], :], both in
  // gemm_input_dtype() (the experts' inputs grouped by expert; a copy, no rounding). The
  // default is gather_rows() and refuses other GEMM input dtypes.
  virtual void gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows,
                                   int32_t n_rows, void* out);

  // A grouped GEMM (a MoE layer's experts): for each group g, rows [offsets[g], offsets[g+1])
  // of x (in gemm_input_dtype(), w[g].cols wide) times w[g]ᵀ into columns [0, w[g].rows) of
  // the same rows of y (stride ldy); groups with no rows are skipped. offsets (n_groups + 1)
  // and w (n_groups) are host arrays. = matmul_rounded() per group, so a row's bits are those
  // of the row alone, whatever the group sizes (the default runs exactly that).
  virtual void matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                              const WeightMatrix* w, float* y, int64_t ldy,
                              NumericsMode numerics = NumericsMode::kInvariant);

  // The (token, rank) pairs of experts (n, k) int32 grouped by expert, pairs in ascending
  // order (t k + r) within a group: offsets (n_experts + 1) the first grouped row of each
  // expert (offsets[n_experts] = n k), src_row (n k) the token of each grouped row, rows (n k)
  // the grouped row of pair t k + r. All in backend memory; integers only. The default is a
  // counting sort on the host (host-memory backends); CUDA: one block on the device.
  virtual void moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                         int32_t* offsets, int32_t* src_row, int32_t* rows);

  // matmul_grouped() with its offsets (n_groups + 1) in backend memory, as moe_group writes
  // them; rows_bound (host) >= offsets[n_groups] sizes the work without reading them. The same
  // bits as matmul_grouped() (a row's bits are the row's alone). The default downloads the
  // offsets and runs matmul_grouped(); CUDA (invariant numerics) launches one grouped kernel
  // that reads them on the device, so nothing comes back to the host.
  virtual void matmul_grouped_device(const void* x, const int32_t* offsets, int32_t n_groups,
                                     int32_t rows_bound, const WeightMatrix* w, float* y,
                                     int64_t ldy,
                                     NumericsMode numerics = NumericsMode::kInvariant);

  // The experts' outputs combined per token: out (n, dim) fp32, row t =
  //   Σ_{r = 0…k-1, in this order} weights[t, r] · y[rows[t k + r], :]      (fp32, from 0)
  //   + sigmoid(shared_gate[t]) · shared[t, :]    (when shared != nullptr; shared_gate (n))
  // y: the experts' output rows; rows (n, k) where token t's rank-r output sits. Products and
  // sums in fp32 without contraction; sigmoid in double with our own exp, rounded to fp32.
  virtual void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n,
                           int32_t k, int32_t dim, const float* shared, const float* shared_gate,
                           float* out);

  // ---- sampling (kernels/sampling/sampler.h) ----------------------------------------------------
  // out[r] (host) = the sampler's result for row r of logits (rows, vocab) (backend memory)
  // with params[r] (host): token, logprob, top logprobs — bit-identical on every backend to
  // detllm::sample(). The host default downloads each row (when needed) and calls the CPU
  // sampler (kernels/sampling/sample_rows.cpp); CUDA samples on the device and downloads only results.
  // params[r] passed SampleRowParams::validate() (the engine validates a request's row once, when
  // the request is added; a device backend does not check the fields again each step). Throws
  // detllm::Error on invalid logits (NaN, +inf, all -inf) or a score_token outside the vocabulary.
  virtual void sample_rows(const float* logits, int32_t rows, int32_t vocab,
                           const SampleRowParams* params, SampleRowResult* out);

  // sample_rows() where some rows carry a token mask (structured output): row r with
  // masks.begin[r] >= 0 gives sample_allowed()'s result (kernels/sampling/masked_sample.h: the
  // token drawn among the allowed ids, logprob and top logprobs of the unmasked row), or status
  // kNoneAllowed when no allowed id has a finite logit; a row without a mask gives
  // sample_rows()'. masks are host memory. The host default runs sample_allowed on each masked
  // row (downloading it on a device backend); CUDA masks a copy of the rows on the device,
  // samples it, and scores the drawn tokens under the unmasked rows (a score_token row), so
  // only results come back. Throws like sample_rows().
  virtual void sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                                  const SampleRowParams* params, RowMasks masks,
                                  SampleRowResult* out);

  // In place on logits (rows, vocab) (backend memory): the n entries (host, strictly
  // ascending by (row, token)) of the logit penalties, each logits[row, token] =
  // penalized_logit(...) (kernels/sampling/logit_penalties.h) — the same bits on every
  // backend. Host default: kernels/sampling/logit_penalties.cpp; CUDA: a kernel over the
  // entries (kernels/cuda/logit_penalties.cu). Throws detllm::Error on an entry out of range.
  virtual void apply_logit_penalties(float* logits, int32_t rows, int32_t vocab,
                                     const LogitPenalty* entries, int32_t n);

  // ---- per-step GEMM numerics (the `verified` mode and mixed traffic, determinism/modes.h) --
  // The numerics a matmul asked for `requested` runs on this ops object. Only GEMMs differ
  // between kInvariant and kFast; every other op is the same kernel in both. Default: the one
  // requested (host backends: both are the invariant kernels anyway); CUDA: default cuBLAS for
  // kFast, and an ops object made in fast mode stays fast. Part of the CUDA graph key: a graph
  // replays the GEMMs it saw.
  virtual NumericsMode gemm_numerics(NumericsMode requested) const { return requested; }

  // ---- optional: ahead-of-time GEMM preparation -----------------------------------------
  // Makes whatever per-(weight shape, row count) choices the backend would otherwise make on
  // first use, for every m up to max_m, so that no request pays for them (CUDA: verifies and
  // times the cuBLASLt plans of every M bucket, gemm_lt.h). Changes no bit. Host: nothing.
  virtual void prepare_matmul(const WeightMatrix& /*w*/, int32_t /*max_m*/) {}

  // ---- optional: step graphs (GraphCapture below) ------------------------------------
  // nullptr when every op runs eagerly (the host backends); CUDA: CUDA graphs.
  virtual GraphCapture* graph_capture() { return nullptr; }

 private:
  std::vector<float> fused_scratch_;  // host scratch of the fused ops' defaults
};

// RAII owner of backend memory (host or device) from Ops::alloc_bytes.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Ops& ops, size_t n_bytes) : ops_(&ops), p_(ops.alloc_bytes(n_bytes)), n_(n_bytes) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : ops_(o.ops_), p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_;
      p_ = o.p_;
      n_ = o.n_;
      o.p_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (p_) ops_->free_bytes(p_);
    p_ = nullptr;
    n_ = 0;
  }
  template <typename T = void>
  T* data() const {
    return static_cast<T*>(p_);
  }
  float* f32() const { return static_cast<float*>(p_); }
  int32_t* i32() const { return static_cast<int32_t*>(p_); }
  size_t size_bytes() const { return n_; }

 private:
  Ops* ops_ = nullptr;
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A recorded sequence of ops (a CUDA graph), replayed by the GraphCapture that made it.
class OpsGraph {
 public:
  virtual ~OpsGraph() = default;
};

// The optional capability of recording the ops queued between begin_capture() and
// end_capture() — recorded, not run — and replaying them later with the same kernel arguments
// (launch shapes and pointers). A replay reads and writes the very memory the capture saw, so
// the caller keeps its buffers at fixed addresses and refreshes inputs in place (upload from
// alloc_pinned memory) before replay(); the backend's own scratch is checked by graph_valid().
// No op may synchronize or allocate while capturing: run the same ops once eagerly first, so
// that the backend's scratch already has its size. Used by LlamaModel for padded decode steps
// (model/step_padding.h, design.md V8); CUDA: kernels/cuda/cuda_graph.h.
class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  virtual void begin_capture() = 0;
  virtual std::unique_ptr<OpsGraph> end_capture() = 0;
  // Ends a capture that failed part-way (an op threw) and drops what was recorded.
  virtual void abort_capture() = 0;
  virtual void replay(const OpsGraph& graph) = 0;
  // False once backend scratch the graph uses was reallocated: capture it again.
  virtual bool graph_valid(const OpsGraph& graph) const = 0;
  // Page-locked host memory, the source of uploads that overlap nothing else.
  virtual void* alloc_pinned(size_t n_bytes) = 0;
  virtual void free_pinned(void* p) = 0;
};

// The plain scalar reference (kernels/ref/): obvious loops, one thread. Tests compare every
// backend against it.
// kv_fp8: K/V rounded to E4M3 on append (Ops::kv_fp8; the reference of the CPU's FP8 KV).
std::unique_ptr<Ops> make_ref_ops(bool kv_fp8 = false);

// The CPU backend's activation rounding (determinism/policy.h: kF32, or kQ8 = name() "cpu-q8").
using detllm::CpuActivations;

// The CPU backend (kernels/cpu/): SIMD, n_threads threads splitting rows and output features,
// never a dot product, so its bits do not depend on n_threads. kv_fp8: --kv-dtype fp8 (K/V
// rounded to E4M3 on append with the per-head scales the model passes; the pool stays fp32).
std::unique_ptr<Ops> make_cpu_ops(int n_threads, CpuActivations act = CpuActivations::kF32,
                                  bool kv_fp8 = false);

}  // namespace detllm::kernels
