// CudaOps: kernels::Ops on one GPU (see cuda_ops.h). Owns a stream, a cuBLAS handle (fast
// mode) and scratch (bf16 activations, GEMM split partials, attention split partials, the
// RoPE table's device copy). All work is queued on the one stream; download() and
// synchronize() wait for it. Test: build-cuda/tests/test_cuda.
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/attention_args.h"
#include "kernels/cuda/cuda_graph.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/fp8_gemm_lt.h"
#include "kernels/cuda/fp8_launch.h"
#include "kernels/cuda/fp8_rule.h"
#include "kernels/cuda/gemm_lt.h"
#include "kernels/cuda/logit_penalties.h"
#include "kernels/cuda/masked_sampling.h"
#include "kernels/gemm_buckets.h"
#include "kernels/gemm_plan_file.h"
#include "kernels/cuda/staged_upload.h"
#include "kernels/fp8_device_matrix.h"
#include "kernels/fp8_fused_input.h"
#include "kernels/sampling/logit_penalties.h"
#include "kernels/sampling/sample_row.h"

namespace detllm::kernels {
namespace {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw_error("CUDA error in {}: {} ({})", what, cudaGetErrorString(err), static_cast<int>(err));
}

void cublas_check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_error("cuBLAS error in {}: {} ({})", what, cublasGetStatusString(st),
                static_cast<int>(st));
}

// A growable device scratch buffer (contents not kept when it grows; grown zeroed).
class Scratch {
 public:
  ~Scratch() { release(); }
  void* get(size_t bytes, cudaStream_t stream) {
    if (bytes == 0) return p_;
    if (bytes > bytes_) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      cuda_check(cudaStreamIsCapturing(stream, &capture), "scratch grow (capture status)");
      check(capture == cudaStreamCaptureStatusNone,
            "CUDA backend: scratch must grow to {} bytes inside a graph capture; run the same "
            "ops once eagerly before capturing them",
            bytes);
      cuda_check(cudaStreamSynchronize(stream), "scratch grow (sync)");
      release();
      const size_t want = std::max(bytes, bytes_ * 2);
      cuda_check(cudaMalloc(&p_, want), "scratch cudaMalloc");
      cuda_check(cudaMemsetAsync(p_, 0, want, stream), "scratch memset");
      bytes_ = want;
    }
    return p_;
  }
  const void* base() const { return p_; }  // moves only when the scratch grows
  void release() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// The plan file an LtGemm persists to: "" when off or when no default location exists. The
// FP8 planner's file is another (its key differs): PATH.fp8 beside a given PATH.
std::string plan_file_path(const CudaOptions::GemmPlanCache& cache,
                           cuda::LtOperands operands = cuda::LtOperands::kBf16) {
  if (!cache.enabled) return "";
  const bool fp8 = operands == cuda::LtOperands::kFp8E4M3;
  if (!cache.path.empty()) return fp8 ? cache.path + ".fp8" : cache.path;
  if (auto p = default_gemm_plan_cache_path(cuda::LtGemm::plan_file_key(operands))) return *p;
  std::fprintf(stderr,
               "detllm: warning: neither XDG_CACHE_HOME nor HOME is set: GEMM plans are not "
               "persisted (give --gemm-plan-cache PATH)\n");
  return "";
}

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const CudaOptions& options)
      : device_(options.device),
        mode_(options.mode),
        force_attention_split_(options.attention_split_blocks),
        attention_force_{options.attention_kernel, options.attention_split_blocks},
        kv_dtype_(options.kv_dtype),
        gemm_variant_(options.gemm_fixed_tile ? kGemmVariantFixedTile : options.gemm_variant),
        fixed_tile_(options.gemm_fixed_tile),
        gemm_splits_override_(options.gemm_splits_override),
        moe_grouped_rows_(options.moe_grouped_rows),
        fp8_wg_splits_(options.fp8_wg_splits),
        fp8_wg_prefill_variant_(options.fp8_wg_prefill_variant),
        fp8_fused_quantize_(options.fp8_fused_quantize),
        sample_config_{options.sample_blocks_per_row, options.sample_candidate_capacity} {
    check(options.attention_kernel >= -1 && options.attention_kernel < kAttentionKernels,
          "CUDA backend: attention_kernel {} unsupported (-1 chosen, 0…{} a kernel)",
          options.attention_kernel, kAttentionKernels - 1);
    const int n = cuda_device_count();
    check(n > 0,
          "CUDA backend: no CUDA device is visible (driver missing or no GPU); use the "
          "cpu backend on this machine");
    check(device_ >= 0 && device_ < n, "CUDA backend: device {} does not exist ({} visible)",
          device_, n);
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    check(prop.major == 9 && prop.minor == 0,
          "CUDA backend: device {} ({}) is sm_{}{}; detllm's kernels are built for sm_90a "
          "(Hopper: H100/H200) only",
          device_, prop.name, prop.major, prop.minor);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    sm_count_ = prop.multiProcessorCount;
    pdl_mode_ = options.programmatic_launch;
    check(kv_dtype_ == DType::kBF16 || kv_dtype_ == DType::kF32 || kv_dtype_ == DType::kF8E4M3,
          "CUDA backend: KV dtype {} unsupported; use bf16, fp32 or fp8 (--kv-dtype)",
          dtype_name(kv_dtype_));
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (kv_dtype_ == DType::kF8E4M3) {
      const std::vector<float> ones(kMaxUnitScales, 1.0f);
      cuda_check(cudaMalloc(reinterpret_cast<void**>(&unit_scales_), sizeof(float) * kMaxUnitScales),
                 "cudaMalloc (FP8 KV unit scales)");
      cuda_check(cudaMemcpyAsync(unit_scales_, ones.data(), sizeof(float) * kMaxUnitScales,
                                 cudaMemcpyHostToDevice, stream_),
                 "FP8 KV unit scales");
      cuda_check(cudaStreamSynchronize(stream_), "FP8 KV unit scales (sync)");
    }
    if (mode_ == NumericsMode::kFast) ensure_cublas();
    if (mode_ == NumericsMode::kInvariant && options.gemm_lt && gemm_variant_ < 0 &&
        gemm_splits_override_ == 0) {
      lt_gemm_ = std::make_unique<cuda::LtGemm>(
          stream_,
          [this](const float* x, int32_t m, const uint16_t* w, int64_t n, int64_t k, float* y) {
            return run_invariant_kernel(x, m, w, n, k, nullptr, y);
          },
          plan_file_path(options.gemm_plan_cache));
    }
    // The FP8 planner, made on first use (a model without per-channel FP8 weights never pays
    // its cuBLASLt handle and workspace): for the per-shape split rule with the launcher's
    // own variants only — an experiment's split or variant measures the kernel.
    fp8_plans_wanted_ = mode_ == NumericsMode::kInvariant && options.gemm_lt &&
                        options.fp8_gemm_lt && fp8_wg_splits_ < 0 &&
                        fp8_wg_prefill_variant_ < 0;
    plan_cache_ = options.gemm_plan_cache;
    graphs_ = std::make_unique<cuda::CudaGraphCapture>(
        stream_,
        [this] {
          return std::vector<const void*>{x_bf16_.base(), partials_.base(), counters_.base(),
                                          attn_.base(), rope_dev_.base(), y_part_.base(),
                                          fp8_act_.base(), fp8_split_.base(),
                                          fp8_tiles_.base()};
        });
  }

  ~CudaOps() override {
    graphs_.reset();
    if (stream_) cudaStreamSynchronize(stream_);
    lt_gemm_.reset();
    fp8_plans_.reset();
    x_bf16_.release();
    partials_.release();
    counters_.release();
    attn_.release();
    rope_dev_.release();
    y_part_.release();
    fp8_act_.release();
    fp8_split_.release();
    fp8_tiles_.release();
    fp8_lt_.reset();
    grouped_ptrs_.release();
    for (auto& [key, table] : weight_tables_) cudaFree(table.device);
    sample_io_.release();
    sample_scratch_.release();
    uploader_.release();
    if (unit_scales_) cudaFree(unit_scales_);
    if (cublas_) cublasDestroy(cublas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // An invariant ops object (the verified mode) runs default cuBLAS for a kFast step; a fast
  // one stays fast whatever is asked (it has no verified plans to fall back on).
  NumericsMode gemm_numerics(NumericsMode requested) const override {
    return mode_ == NumericsMode::kFast ? NumericsMode::kFast : requested;
  }

  // The cuBLAS handle, made on first use (fast mode: at construction; verified: on the first
  // fast step, always eagerly before any graph capture of a fast step).
  void ensure_cublas() {
    if (cublas_) return;
    cublas_check(cublasCreate(&cublas_), "cublasCreate");
    cublas_check(cublasSetStream(cublas_, stream_), "cublasSetStream");
  }

  std::string_view name() const override {
    if (mode_ == NumericsMode::kFast) return "cuda-fast";
    return fixed_tile_ ? "cuda-bi-naive" : "cuda-invariant";
  }

  // ---- memory -----------------------------------------------------------------------
  bool host_memory() const override { return false; }
  DType weight_dtype() const override { return DType::kBF16; }
  // FP8 weights (docs/cuda.md "FP8 on the model"): E4M3 with per-channel or 128-column block
  // scales in the device form of kernels/fp8_device_matrix.h, which the model uploads; the FP8
  // GEMMs below run them.
  bool reads_weight_dtype(DType t) const override { return t == weight_dtype() || dtype_is_fp8(t); }
  DType kv_dtype() const override { return kv_dtype_; }
  // --kv-dtype fp8: E4M3 codes with the model's per-(layer, KV head) scales (KvCacheLayer's
  // k_scale / v_scale, device memory), rounded once on append; attention reads the codes
  // (the packed CTA, attention_fp8_load.cuh).
  bool kv_fp8() const override { return kv_dtype_ == DType::kF8E4M3; }
  size_t device_memory_free() const override {
    size_t free = 0, total = 0;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return free;
  }

  void* alloc_bytes(size_t n_bytes) override {
    if (n_bytes == 0) return nullptr;
    void* p = nullptr;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    const cudaError_t err = cudaMalloc(&p, n_bytes);
    if (err != cudaSuccess)
      throw_error("CUDA backend: cannot allocate {} MiB on device {}: {}", n_bytes >> 20, device_,
                  cudaGetErrorString(err));
    cuda_check(cudaMemsetAsync(p, 0, n_bytes, stream_), "alloc memset");
    return p;
  }
  void free_bytes(void* p) override {
    if (p == nullptr) return;
    cudaStreamSynchronize(stream_);  // no throw from destructors; errors show at the next call
    cudaFree(p);
  }
  void upload(void* dst, const void* src_host, size_t n_bytes) override {
    if (n_bytes == 0) return;
    uploader_.upload(dst, src_host, n_bytes, stream_);  // large ones through pinned staging
  }
  void download(void* dst_host, const void* src, size_t n_bytes) override {
    if (n_bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst_host, src, n_bytes, cudaMemcpyDeviceToHost, stream_),
               "download");
    cuda_check(cudaStreamSynchronize(stream_), "download (sync)");
  }
  void copy(void* dst, const void* src, size_t n_bytes) override {
    fp8_input_.forget();
    if (n_bytes == 0) return;
    cuda_check(cudaMemcpyAsync(dst, src, n_bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
  }
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                 size_t row_bytes, int64_t rows) override {
    fp8_input_.forget();
    if (row_bytes == 0 || rows <= 0) return;
    cuda_check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes,
                                 static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream_),
               "copy_rows");
  }
  void synchronize() override { cuda_check(cudaStreamSynchronize(stream_), "synchronize"); }
  void bind_thread() override { cuda_check(cudaSetDevice(device_), "cudaSetDevice"); }
  GraphCapture* graph_capture() override { return graphs_.get(); }
  void fill_uniform(void* dst, DType dtype, int64_t n, uint64_t key, float center,
                    float scale) override {
    check(dtype == DType::kF32 || dtype == DType::kBF16,
          "CUDA fill_uniform: dtype {} unsupported (f32 or bf16)", dtype_name(dtype));
    cuda_check(
        cuda::launch_fill_uniform(dst, dtype == DType::kBF16, n, key, center, scale, stream_),
        "fill_uniform");
  }

  // ---- ops --------------------------------------------------------------------------
  void embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) override {
    check(table.dtype == DType::kBF16 || table.dtype == DType::kF32,
          "CUDA embedding: table dtype {} unsupported (bf16 or f32)", dtype_name(table.dtype));
    cuda_check(cuda::launch_embedding(table.data, table.dtype == DType::kBF16, table.rows,
                                      table.cols, ids, n, out, stream_),
               "embedding");
  }

  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    cuda_check(cuda::launch_rmsnorm(x, w, n, dim, eps, out, stream_), "rmsnorm");
  }

  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
              NumericsMode numerics) override {
    check_matmul_args(x, w);
    if (m == 0) return;
    if (dtype_is_fp8(w.dtype)) {
      // matmul_rounded's FP8 linear on the bf16 rounding of x (what the model's producers write).
      auto* xb = static_cast<uint16_t*>(x_bf16_.get(size_t{2} * m * w.cols, stream_));
      cuda_check(cuda::launch_f32_to_bf16(x, int64_t{m} * w.cols, xb, stream_), "f32_to_bf16");
      return fp8_linear(xb, m, w, bias, y, numerics);
    }
    const auto* wd = static_cast<const uint16_t*>(w.data);
    // The verified mode asks for fast numerics per step on an invariant ops object.
    const bool fast = gemm_numerics(numerics) == NumericsMode::kFast;
    if (fast || (lt_gemm_ && lt_gemm_->prefers_lt(m, wd, w.rows, w.cols))) {
      // x rounded to bf16, then the same paths as a bf16 input (cuBLAS, or a cuBLASLt
      // execution verified bit-equal to the invariant kernel, gemm_lt.h).
      auto* xb = static_cast<uint16_t*>(x_bf16_.get(size_t{2} * m * w.cols, stream_));
      cuda_check(cuda::launch_f32_to_bf16(x, int64_t{m} * w.cols, xb, stream_), "f32_to_bf16");
      return gemm_bf16(xb, m, w, bias, y, numerics);
    }
    cuda_check(run_invariant_kernel(x, m, wd, w.rows, w.cols, bias, y), "invariant gemm");
  }

  // ---- the fused ops (fused.cu; GEMM inputs in bf16) --------------------------------
  DType gemm_input_dtype() const override { return DType::kBF16; }

  void matmul_rounded(const void* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
                      int64_t ldy, NumericsMode numerics) override {
    check_matmul_args(x, w);
    check(ldy >= w.rows, "CUDA matmul_rounded: row stride {} below {} output features", ldy,
          w.rows);
    if (m == 0) return;
    const auto* xb = static_cast<const uint16_t*>(x);
    const bool fp8 = dtype_is_fp8(w.dtype);
    if (ldy == w.rows)
      return fp8 ? fp8_linear(xb, m, w, bias, y, numerics) : gemm_bf16(xb, m, w, bias, y, numerics);
    // One part of a projection kept apart: into scratch, then its columns into place.
    float* tmp = static_cast<float*>(y_part_.get(sizeof(float) * m * w.rows, stream_));
    if (fp8)
      fp8_linear(xb, m, w, bias, tmp, numerics);
    else
      gemm_bf16(xb, m, w, bias, tmp, numerics);
    cuda_check(cudaMemcpy2DAsync(y, sizeof(float) * ldy, tmp, sizeof(float) * w.rows,
                                 sizeof(float) * w.rows, m, cudaMemcpyDeviceToDevice, stream_),
               "matmul_rounded (columns)");
  }

  // Readers whose activations are quantized per token (per channel, 128×128 weight blocks).
  void announce_gemm_input(const void* out, const WeightMatrix& reader) override {
    const bool rows = reader.dtype == DType::kF8E4M3 || reader.dtype == DType::kF8E4M3B128;
    if (!fp8_fused_quantize_ || !rows) return fp8_input_.withdraw();
    fp8_input_.announce(out, reader.cols, fp8_params(reader));
  }

  void add_rmsnorm(float* x, const float* y, const float* w, int32_t n, int32_t dim, float eps,
                   void* out) override {
    auto* ob = static_cast<__nv_bfloat16*>(out);
    if (const auto q = produce_fp8_input(out, n, dim)) {
      cuda_check(cuda::launch_add_rmsnorm_fp8(x, y, w, n, dim, eps, ob, *q, stream_, pdl(n)),
                 "add_rmsnorm (with the FP8 rows)");
      return;
    }
    cuda_check(cuda::launch_add_rmsnorm(x, y, w, n, dim, eps, ob, stream_, pdl(n)), "add_rmsnorm");
  }

  void qkv_rope_append(const float* qkv, int32_t n, int32_t n_heads, const float* q_norm,
                       const float* k_norm, float eps, const RopeTable& table,
                       const StepBatch& batch, const KvCacheLayer& cache, float* q_out) override {
    check_cache_dtype(cache);
    check((q_norm == nullptr) == (k_norm == nullptr),
          "qkv_rope_append: q_norm and k_norm are given together or not at all");
    check(cuda::qkv_rope_append_supported(cache.head_dim, table.rot_dim) &&
              static_cast<int64_t>(table.inv_freq.size()) == table.rot_dim / 2,
          "CUDA qkv_rope_append: head_dim {} (at most 256) and rot_dim {} (even, at most "
          "head_dim) unsupported",
          cache.head_dim, table.rot_dim);
    cuda::QkvRopeArgs a;
    a.qkv = qkv;
    a.n = n;
    a.n_heads = n_heads;
    a.n_kv_heads = cache.n_kv_heads;
    a.head_dim = cache.head_dim;
    a.q_norm = q_norm;
    a.k_norm = k_norm;
    a.eps = eps;
    a.positions = batch.positions;
    a.slots = batch.slots;
    a.inv_freq = rope_table_on_device(table);
    a.half = table.rot_dim / 2;
    a.n_slots = int64_t{cache.n_blocks} * cache.block_size;
    a.cache_k = cache.k;
    a.cache_v = cache.v;
    a.kv_bf16 = cache.dtype == DType::kBF16;
    a.kv_fp8 = cache.dtype == DType::kF8E4M3;
    if (a.kv_fp8) std::tie(a.k_scale, a.v_scale) = fp8_scales(cache);
    a.q_out = q_out;
    a.pdl = pdl(n);
    cuda_check(cuda::launch_qkv_rope_append(a, stream_), "qkv_rope_append");
  }

  void attention_rounded(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                         int32_t n_heads, float scale, void* out) override {
    fp8_input_.forget();
    auto* ob = static_cast<__nv_bfloat16*>(out);
    if (cache.dtype != DType::kF32) return run_attention(q, cache, batch, n_heads, scale, nullptr, ob);
    // fp32 KV (attention.cu) writes fp32: round it after.
    const int64_t n_out = int64_t{batch.n_tokens} * n_heads * cache.head_dim;
    float* tmp = static_cast<float*>(y_part_.get(sizeof(float) * n_out, stream_));
    run_attention(q, cache, batch, n_heads, scale, tmp, nullptr);
    cuda_check(cuda::launch_f32_to_bf16(tmp, n_out, reinterpret_cast<uint16_t*>(ob), stream_),
               "attention_rounded (bf16)");
  }

  void silu_mul_rows(const float* gate_up, int32_t n, int32_t ffn, void* out) override {
    auto* ob = static_cast<__nv_bfloat16*>(out);
    if (const auto q = produce_fp8_input(out, n, ffn)) {
      cuda_check(cuda::launch_silu_mul_rows_fp8(gate_up, n, ffn, ob, *q, stream_, pdl(n)),
                 "silu_mul_rows (with the FP8 rows)");
      return;
    }
    cuda_check(cuda::launch_silu_mul_rows(gate_up, n, ffn, ob, stream_, pdl(n)), "silu_mul_rows");
  }

  // The FP8 form of a GEMM input in fp8_act_: codes (m, k), then the m row scales (or m row ×
  // ⌈k / 128⌉ group scales) at a 256-byte boundary.
  struct Fp8Act {
    uint8_t* codes;
    float* scale;
  };
  Fp8Act fp8_act(int32_t m, int64_t k, int64_t scales) {
    const size_t codes = (static_cast<size_t>(m) * static_cast<size_t>(k) + 255) / 256 * 256;
    auto* base = static_cast<uint8_t*>(
        fp8_act_.get(codes + sizeof(float) * static_cast<size_t>(scales), stream_));
    return {base, reinterpret_cast<float*>(base + codes)};
  }

  // The activation parameters of an FP8 matrix (kernels/fp8_device_matrix.h): its rule.
  static const float* fp8_params(const WeightMatrix& w) {
    return reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) +
                                          fp8_device_params_offset(w.dtype, w.rows, w.cols));
  }

  // A producer's part of announce_gemm_input (kernels/fp8_fused_input.h): where `out` (n, k)
  // is the announced input, where to write its FP8 rows as well; nullopt otherwise.
  std::optional<cuda::Fp8RowsOut> produce_fp8_input(const void* out, int32_t n, int64_t k) {
    const auto* params = static_cast<const float*>(fp8_input_.produce(out, n, k));
    if (params == nullptr) return std::nullopt;
    const Fp8Act act = fp8_act(n, k, n);
    return cuda::Fp8RowsOut{act.codes, act.scale, params};
  }

  // The FP8 linear (w in the device form of kernels/fp8_device_matrix.h): each row of xb (bf16)
  // quantized to E4M3 by the matrix's rule (fp8_quant.cu, row-local: the row's amax / 448,
  // capped by an activation bound, or the checkpoint's static scale), then
  //   invariant numerics: the FP8 wgmma GEMM with k split in a per-shape number of runs
  //     (fp8_gemm_wg_split.cuh; the split from n and the device, never from m) — one rule for a
  //     model's FP8 linears whatever the batch, so a row's bits are its own;
  //   fast numerics: cuBLASLt's FP8 matmul with outer-vector scales (fp8_gemm_lt.h), its order
  //     chosen per m; where this cuBLASLt has no algorithm for the shape, the wgmma kernel.
  // No host synchronization and no allocation once the scratch has its size (CUDA graphs);
  // cuBLASLt's plan of a shape is made by the eager step that precedes every capture.
  // 128-column block scales (kF8E4M3B128, kF8E4M3G128; DeepSeek-style checkpoints): the wgmma
  // GEMM's block form (launch_fp8_gemm_wg_blocks) in both numerics — cuBLASLt's block-scaled
  // FP8 is not used — after the per-token or, for kF8E4M3G128, per-(token, 128-column group)
  // quantizer.
  void fp8_linear(const uint16_t* xb, int32_t m, const WeightMatrix& w, const float* bias,
                  float* y, NumericsMode numerics) {
    const int64_t n = w.rows, k = w.cols;
    const auto* codes = static_cast<const uint8_t*>(w.data);
    const auto* w_scale =
        reinterpret_cast<const float*>(codes + fp8_device_scale_offset(w.dtype, n, k));
    const float* params = fp8_params(w);
    const bool groups = w.dtype == DType::kF8E4M3G128;
    const int64_t x_scales = groups ? m * fp8_device_row_scales(w.dtype, k) : m;
    const Fp8Act act = fp8_act(m, k, x_scales);
    uint8_t* xq = act.codes;
    float* x_scale = act.scale;
    if (!groups && fp8_input_.holds(xb, m, k, params)) {
      ++fp8_fused_reads_;  // its producer wrote these rows' FP8 form (announce_gemm_input)
    } else if (groups) {
      fp8_input_.forget();  // fp8_act_ is overwritten
      cuda_check(
          cuda::launch_fp8_quantize_groups_params(xb, true, m, k, params, xq, x_scale, stream_),
          "fp8 quantize (128-column groups)");
    } else {
      fp8_input_.forget();
      cuda_check(
          cuda::launch_fp8_quantize_rows_params(xb, true, m, k, params, xq, x_scale, stream_,
                                                pdl(m)),
          "fp8 quantize");
    }
    if (w.dtype != DType::kF8E4M3) {
      cuda_check(cuda::launch_fp8_gemm_wg_blocks(xq, x_scale, m, codes, w_scale, n, k, groups,
                                                 bias, y, -1, stream_),
                 "fp8 gemm (wgmma, 128-column block scales)");
      return;
    }
    if (gemm_numerics(numerics) == NumericsMode::kFast) {
      if (!fp8_lt_) fp8_lt_ = std::make_unique<cuda::Fp8LtGemm>();
      const cublasStatus_t st = fp8_lt_->run(xq, x_scale, m, codes, w_scale, n, k, y, stream_);
      if (st == CUBLAS_STATUS_SUCCESS) {
        if (bias) cuda_check(cuda::launch_add_bias(y, bias, m, n, stream_), "add_bias (fp8)");
        return;
      }
      check(st == CUBLAS_STATUS_NOT_SUPPORTED, "cuBLASLt FP8 matmul ({}×{}×{}): {}", m, n, k,
            cublasGetStatusString(st));
      cuda_check(cuda::launch_fp8_gemm_wg(xq, x_scale, m, codes, w_scale, n, k, bias, y, -1,
                                          stream_),
                 "fp8 gemm (wgmma; cuBLASLt has no algorithm)");
      return;
    }
    // A verified cuBLASLt plan where one is faster (same bits; gemm_lt.h), else the kernel.
    if (bias == nullptr) {
      if (cuda::LtGemm* plans = fp8_plans();
          plans != nullptr && plans->prefers_lt(m, codes, w_scale, n, k) &&
          plans->run(xq, x_scale, m, codes, w_scale, n, k, y))
        return;
    }
    cuda_check(run_fp8_invariant_kernel(xq, x_scale, m, codes, w_scale, n, k, bias, y),
               "fp8 gemm (wgmma, split k)");
  }

  // The FP8 planner (made on first use), or nullptr where plans are off.
  cuda::LtGemm* fp8_plans() {
    if (!fp8_plans_ && fp8_plans_wanted_)
      fp8_plans_ = std::make_unique<cuda::LtGemm>(
          stream_,
          [this](const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
                 const float* w_scale, int64_t n, int64_t k, float* y) {
            return run_fp8_invariant_kernel(xq, x_scale, m, w, w_scale, n, k, nullptr, y);
          },
          [this](int64_t n, int64_t k) {
            return cuda::fp8_gemm_wg_split_runs(
                k, cuda::fp8_gemm_wg_auto_splits(n, k, sm_count_));
          },
          plan_file_path(plan_cache_, cuda::LtOperands::kFp8E4M3));
    return fp8_plans_.get();
  }

  // The invariant FP8 GEMM of per-channel weights with this object's scratch. Per shape (the
  // default): the split launcher even where S = 1 (gate_up on an H100), whose small-m schedule
  // gives launch_fp8_gemm_wg's bits faster (55 against 64 µs at m = 1).
  cudaError_t run_fp8_invariant_kernel(const uint8_t* xq, const float* x_scale, int32_t m,
                                       const uint8_t* codes, const float* w_scale, int64_t n,
                                       int64_t k, const float* bias, float* y) {
    const int splits =
        fp8_wg_splits_ < 0 ? cuda::fp8_gemm_wg_auto_splits(n, k, sm_count_) : fp8_wg_splits_;
    if (fp8_wg_splits_ < 0 || splits > 1) {
      // The run chains in scratch where the runs get CTAs of their own; in registers above.
      const size_t ws = m <= cuda::kFp8GemmWgSplitCtaMaxM
                            ? cuda::fp8_gemm_wg_split_workspace(m, n, k, splits)
                            : 0;
      auto* chains = static_cast<float*>(fp8_split_.get(sizeof(float) * ws, stream_));
      // The tiles' finished-run counts: zeroed when the scratch grows, left zero by each launch.
      auto* counts = ws == 0 ? nullptr
                             : static_cast<unsigned*>(fp8_tiles_.get(
                                   sizeof(unsigned) * cuda::fp8_gemm_wg_split_tiles(m, n), stream_));
      const int variant = m > cuda::kFp8GemmWgSplitCtaMaxM ? fp8_wg_prefill_variant_ : -1;
      return cuda::launch_fp8_gemm_wg_split(xq, x_scale, m, codes, w_scale, n, k, bias, y, splits,
                                            chains, ws, variant, stream_, counts, pdl(m));
    }
    return cuda::launch_fp8_gemm_wg(xq, x_scale, m, codes, w_scale, n, k, bias, y, -1, stream_);
  }

  // y = x (bf16) · wᵀ (+ bias) through the same three paths as matmul().
  void gemm_bf16(const uint16_t* xb, int32_t m, const WeightMatrix& w, const float* bias,
                 float* y, NumericsMode numerics) {
    const auto* wd = static_cast<const uint16_t*>(w.data);
    if (gemm_numerics(numerics) == NumericsMode::kFast) {
      ensure_cublas();
      cublas_gemm(xb, m, w, y);
      if (bias) cuda_check(cuda::launch_add_bias(y, bias, m, w.rows, stream_), "add_bias");
      return;
    }
    if (lt_gemm_ && lt_gemm_->prefers_lt(m, wd, w.rows, w.cols) &&
        lt_gemm_->run(xb, m, wd, w.rows, w.cols, y)) {
      if (bias) cuda_check(cuda::launch_add_bias(y, bias, m, w.rows, stream_), "add_bias");
      return;
    }
    const cuda::GemmScratchNeed need =
        cuda::gemm_scratch_need(m, w.rows, w.cols, gemm_variant_, gemm_splits_override_);
    cuda::GemmScratch s;
    s.partials = static_cast<float*>(partials_.get(need.partials, stream_));
    s.counters = static_cast<int32_t*>(counters_.get(need.counters, stream_));
    cuda_check(cuda::launch_gemm_invariant_bf16(xb, m, wd, w.rows, w.cols, bias, y, s,
                                                gemm_variant_, gemm_splits_override_,
                                                stream_),
               "invariant gemm (bf16 input)");
  }

  // Default cuBLAS (the fast numerics): y (m, n) = xb (m, k) · wᵀ, fp32 out.
  void cublas_gemm(const uint16_t* xb, int32_t m, const WeightMatrix& w, float* y) {
    // Column-major view: yᵀ (N, m) = W (N, K) · xᵀ (K, m); W row-major (N, K) is col-major
    // (K, N), hence op T. Default algorithm: cuBLAS's own heuristic choice.
    const float alpha = 1.0f, beta = 0.0f;
    cublas_check(
        cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), m,
                     static_cast<int>(w.cols), &alpha, w.data, CUDA_R_16BF,
                     static_cast<int>(w.cols), xb, CUDA_R_16BF, static_cast<int>(w.cols), &beta, y,
                     CUDA_R_32F, static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  void check_matmul_args(const void* x, const WeightMatrix& w) const {
    if (dtype_is_fp8(w.dtype)) {
      check(cuda::fp8_gemm_shape_supported(w.rows, w.cols),
            "CUDA FP8 matmul: in_features {} must be a multiple of 16", w.cols);
      check(reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                reinterpret_cast<uintptr_t>(w.data) % 16 == 0,
            "CUDA FP8 matmul: x and w must be 16-byte aligned");
      return;
    }
    check(w.dtype == DType::kBF16,
          "CUDA matmul: weights must be bf16 on the device (got {}); upload them through "
          "Ops::weight_dtype()",
          dtype_name(w.dtype));
    check(cuda::gemm_shape_supported(w.rows, w.cols),
          "CUDA matmul: in_features {} must be a multiple of 8", w.cols);
    check(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0,
          "CUDA matmul: x and w must be 16-byte aligned");
  }

  void prepare_matmul(const WeightMatrix& w, int32_t max_m) override {
    if (max_m <= 0) return;
    const int32_t last = cuda::lt_bucket(max_m);
    if (lt_gemm_ && w.dtype == DType::kBF16) {
      const auto* wd = static_cast<const uint16_t*>(w.data);
      for (int32_t b = 1; b <= last; b = gemm_bucket_above(b))
        lt_gemm_->prefers_lt(b, wd, w.rows, w.cols);  // tunes the bucket's plan if missing
    }
    if (w.dtype == DType::kF8E4M3 && fp8_plans() != nullptr) {
      const auto* codes = static_cast<const uint8_t*>(w.data);
      const auto* w_scale = reinterpret_cast<const float*>(
          codes + fp8_device_scale_offset(w.dtype, w.rows, w.cols));
      for (int32_t b = 1; b <= last; b = gemm_bucket_above(b))
        fp8_plans_->prefers_lt(b, codes, w_scale, w.rows, w.cols);
    }
  }

  int64_t fp8_fused_reads() const { return fp8_fused_reads_; }
  // The bf16 plans, then the FP8 ones.
  std::vector<cuda::LtPlanReport> gemm_plans() const {
    std::vector<cuda::LtPlanReport> out =
        lt_gemm_ ? lt_gemm_->reports() : std::vector<cuda::LtPlanReport>{};
    if (fp8_plans_)
      for (cuda::LtPlanReport& r : fp8_plans_->reports()) out.push_back(std::move(r));
    return out;
  }
  std::vector<const cuda::LtPlanFileStats*> gemm_plan_file_stats() const {
    std::vector<const cuda::LtPlanFileStats*> out;
    if (lt_gemm_) out.push_back(&lt_gemm_->plan_file_stats());
    if (fp8_plans_) out.push_back(&fp8_plans_->plan_file_stats());
    return out;
  }

  // The invariant GEMM kernel (gemm.cu) with this object's scratch.
  cudaError_t run_invariant_kernel(const float* x, int32_t m, const uint16_t* w, int64_t n,
                                   int64_t k, const float* bias, float* y) {
    const cuda::GemmScratchNeed need =
        cuda::gemm_scratch_need(m, n, k, gemm_variant_, gemm_splits_override_);
    cuda::GemmScratch s;
    s.x_bf16 = static_cast<uint16_t*>(x_bf16_.get(need.x_bf16, stream_));
    s.partials = static_cast<float*>(partials_.get(need.partials, stream_));
    s.counters = static_cast<int32_t*>(counters_.get(need.counters, stream_));
    return cuda::launch_gemm_invariant(x, m, w, n, k, bias, y, s, gemm_variant_,
                                       gemm_splits_override_, stream_);
  }

  void rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim, const int32_t* positions,
            const RopeTable& table) override {
    const int32_t half = table.rot_dim / 2;
    check(table.rot_dim <= head_dim && static_cast<int64_t>(table.inv_freq.size()) == half,
          "CUDA rope: bad table (rot_dim {}, head_dim {})", table.rot_dim, head_dim);
    cuda_check(cuda::launch_rope(x, n, n_heads, head_dim, positions, rope_table_on_device(table),
                                 table.rot_dim, stream_),
               "rope");
  }

  // The table is a host struct: keep its device copy, refreshed when the contents change.
  // The copy goes on the Ops' stream, so the kernels after it see it. (It was a plain
  // cudaMemcpy on the legacy stream: from pageable memory that may return before the DMA lands,
  // and the legacy stream does not order a non-blocking stream, so a rope kernel could read a
  // stale table — seen as wrong RoPE when another process shared the GPU.)
  const float* rope_table_on_device(const RopeTable& table) {
    const int32_t half = table.rot_dim / 2;
    if (rope_host_ != table.inv_freq) {
      float* d = static_cast<float*>(rope_dev_.get(sizeof(float) * std::max(half, 1), stream_));
      // Stream order puts the copy after every kernel that still reads the old table.
      cuda_check(cudaMemcpyAsync(d, table.inv_freq.data(), sizeof(float) * half,
                                 cudaMemcpyHostToDevice, stream_),
                 "rope table upload");
      cuda_check(cudaStreamSynchronize(stream_), "rope table upload (sync)");  // host copy free
      rope_host_ = table.inv_freq;
    }
    return static_cast<const float*>(rope_dev_.get(0, stream_));
  }

  void kv_append(const float* k, const float* v, const StepBatch& batch,
                 const KvCacheLayer& cache) override {
    const int64_t row = int64_t{cache.n_kv_heads} * cache.head_dim;
    const int64_t n_slots = int64_t{cache.n_blocks} * cache.block_size;
    check_cache_dtype(cache);
    if (cache.dtype == DType::kF8E4M3) {
      const auto [ks, vs] = fp8_scales(cache);
      cuda_check(cuda::launch_kv_append_fp8(k, v, batch.slots, batch.n_tokens, cache.n_kv_heads,
                                            cache.head_dim, n_slots, ks, vs,
                                            static_cast<uint8_t*>(cache.k),
                                            static_cast<uint8_t*>(cache.v), stream_),
                 "kv_append (fp8)");
      return;
    }
    if (cache.dtype == DType::kBF16) {
      cuda_check(cuda::launch_kv_append_bf16(k, v, batch.slots, batch.n_tokens, row, n_slots,
                                             static_cast<uint16_t*>(cache.k),
                                             static_cast<uint16_t*>(cache.v), stream_),
                 "kv_append (bf16)");
      return;
    }
    cuda_check(cuda::launch_kv_append(k, v, batch.slots, batch.n_tokens, row, n_slots,
                                      cache.k_f32(), cache.v_f32(), stream_),
               "kv_append");
  }

  void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch, int32_t n_heads,
                 float scale, float* out) override {
    run_attention(q, cache, batch, n_heads, scale, out, nullptr);
  }

  // An FP8 cache's per-head scales: the layer's (the model passes them, fixed at load), or —
  // for a caller without any, as Ops::kv_append allows (the startup self-check's random K/V) —
  // 1 for every head (codes e4m3(x)), from a device array of ones made at construction.
  std::pair<const float*, const float*> fp8_scales(const KvCacheLayer& cache) const {
    if (cache.k_scale != nullptr && cache.v_scale != nullptr) return {cache.k_scale, cache.v_scale};
    check(cache.k_scale == nullptr && cache.v_scale == nullptr && unit_scales_ != nullptr &&
              cache.n_kv_heads <= kMaxUnitScales,
          "CUDA backend: an FP8 KV cache with K scales but no V scales (or the reverse), or "
          "{} KV heads without scales (at most {})",
          cache.n_kv_heads, kMaxUnitScales);
    return {unit_scales_, unit_scales_};
  }

  // Into out (fp32) or, for a bf16 or FP8 cache only, out_bf16.
  void run_attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch,
                     int32_t n_heads, float scale, float* out, __nv_bfloat16* out_bf16) {
    check(n_heads > 0 && cache.n_kv_heads > 0 && n_heads % cache.n_kv_heads == 0 &&
              n_heads / cache.n_kv_heads <= 32,
          "CUDA attention: n_heads {} must be a multiple (≤ 32×) of n_kv_heads {}", n_heads,
          cache.n_kv_heads);
    check_cache_dtype(cache);
    cuda::AttentionArgs a = cuda::attention_step_args(q, cache, batch, n_heads, scale, out);
    if (cache.dtype == DType::kF8E4M3) {
      // The packed CTA and the decode warps read the codes (attention_fp8_load.cuh,
      // attention_tc_decode_warp.cuh): the planner picks between them (the step shape says the
      // cache is FP8), with the bf16 cache's reduction grid and order.
      check(attention_tc_supported(cache.head_dim, n_heads / cache.n_kv_heads),
            "CUDA attention with an FP8 KV cache: head_dim {} and {} query heads per KV head "
            "unsupported (head_dim 16, 32, 64 or 128; at most 64 heads per KV head)",
            cache.head_dim, n_heads / cache.n_kv_heads);
      a.k_fp8 = static_cast<const uint8_t*>(cache.k);
      a.v_fp8 = static_cast<const uint8_t*>(cache.v);
      std::tie(a.k_scale, a.v_scale) = fp8_scales(cache);
      a.out_bf16 = out_bf16;
      a.pdl = pdl(batch.n_tokens);
      const AttentionPlan plan =
          plan_attention(cuda::attention_step_shape(a, batch.n_seqs), attention_force_);
      float* scratch =
          static_cast<float*>(attn_.get(sizeof(float) * plan.scratch_floats, stream_));
      cuda_check(cuda::launch_attention_tc(a, plan, scratch, stream_),
                 "attention (tensor cores, FP8 KV)");
      return;
    }
    if (cache.dtype == DType::kBF16) {
      check(attention_tc_supported(cache.head_dim, n_heads / cache.n_kv_heads),
            "CUDA attention with a bf16 KV cache: head_dim {} and {} query heads per KV head "
            "unsupported (head_dim 16, 32, 64 or 128; at most 64 heads per KV head); use "
            "--kv-dtype fp32",
            cache.head_dim, n_heads / cache.n_kv_heads);
      a.k_bf16 = static_cast<const uint16_t*>(cache.k);
      a.v_bf16 = static_cast<const uint16_t*>(cache.v);
    } else {
      check(cuda::attention_head_dim_supported(cache.head_dim),
            "CUDA attention: head_dim {} unsupported (a multiple of 4, at most 256)",
            cache.head_dim);
      a.k_cache = cache.k_f32();
      a.v_cache = cache.v_f32();
    }
    a.out_bf16 = out_bf16;
    a.pdl = pdl(batch.n_tokens);
    if (cache.dtype == DType::kBF16) {
      const AttentionPlan plan =
          plan_attention(cuda::attention_step_shape(a, batch.n_seqs), attention_force_);
      float* scratch =
          static_cast<float*>(attn_.get(sizeof(float) * plan.scratch_floats, stream_));
      cuda_check(cuda::launch_attention_tc(a, plan, scratch, stream_),
                 "attention (tensor cores, bf16 KV)");
      return;
    }
    float* scratch = static_cast<float*>(attn_.get(
        sizeof(float) * cuda::attention_scratch_floats(a, force_attention_split_), stream_));
    cuda_check(cuda::launch_attention(a, scratch, force_attention_split_, stream_), "attention");
  }

  // A cache of another dtype than this backend's (made by another ops object) is a bug.
  void check_cache_dtype(const KvCacheLayer& cache) const {
    check(cache.dtype == kv_dtype_,
          "CUDA backend: the KV cache is {} but this backend was made for {} KV; allocate it "
          "through KvStorage (Ops::kv_dtype())",
          dtype_name(cache.dtype), dtype_name(kv_dtype_));
  }

  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cuda_check(cuda::launch_silu_mul(gate, up, n, out, stream_), "silu_mul");
  }

  void add(float* x, const float* y, int64_t n) override {
    cuda_check(cuda::launch_add(x, y, n, stream_), "add");
  }

  void gather_rows(const float* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                   float* out) override {
    cuda_check(cuda::launch_gather_rows(x, dim, rows, n_rows, out, stream_), "gather_rows");
  }

  // ---- mixture of experts (moe.cu; the grouped GEMM: Ops::matmul_grouped's per-group
  // matmul_rounded, docs/cuda.md "Mixture of experts") ---------------------------------
  void moe_route(const float* logits, int32_t n, int32_t n_experts, int32_t k, bool renormalize,
                 int32_t* experts, float* weights) override {
    check(k >= 1 && k <= n_experts, "moe_route: top-{} of {} experts", k, n_experts);
    check(n_experts <= cuda::kMaxRouteExperts,
          "CUDA moe_route: {} experts, at most {} (a warp's ranking masks)", n_experts,
          cuda::kMaxRouteExperts);
    cuda_check(cuda::launch_moe_route(logits, n, n_experts, k, renormalize, experts, weights,
                                      stream_),
               "moe_route");
  }
  // Invariant numerics: the host default, the invariant GEMM once per non-empty group (each
  // row's K chain fixed by the weight's shape: a row's bits are its own, whatever the group).
  // Fast numerics: every non-empty group in one cublasGemmGroupedBatchedEx call (the problem
  // sizes are host arrays, the pointer arrays go up first); a cuBLAS without bf16 grouped
  // support runs the default's per-group cuBLAS GEMMs instead (the same numerics class).
  // FP8 experts (both numerics): the default, each group on the FP8 linear (its rows quantized
  // per token or group, the wgmma GEMM or its block form): a row's bits are its own.
  void matmul_grouped(const void* x, const int32_t* offsets, int32_t n_groups,
                      const WeightMatrix* w, float* y, int64_t ldy,
                      NumericsMode numerics) override {
    if (gemm_numerics(numerics) != NumericsMode::kFast || !grouped_cublas_ok_ ||
        (n_groups > 0 && dtype_is_fp8(w[0].dtype)))
      return Ops::matmul_grouped(x, offsets, n_groups, w, y, ldy, numerics);
    ensure_cublas();
    grouped_.clear();
    for (int32_t g = 0; g < n_groups; ++g) {
      const int32_t first = offsets[g], rows = offsets[g + 1] - offsets[g];
      check(rows >= 0, "matmul_grouped: group {} has {} rows", g, rows);
      if (rows == 0) continue;
      check_matmul_args(x, w[g]);
      check(ldy >= w[g].rows, "CUDA matmul_grouped: row stride {} below {} output features", ldy,
            w[g].rows);
      grouped_.m.push_back(static_cast<int>(w[g].rows));
      grouped_.n.push_back(rows);
      grouped_.k.push_back(static_cast<int>(w[g].cols));
      grouped_.ptrs.push_back(w[g].data);
      grouped_.ptrs.push_back(static_cast<const uint16_t*>(x) + int64_t{first} * w[g].cols);
      grouped_.ptrs.push_back(y + int64_t{first} * ldy);
    }
    const int count = static_cast<int>(grouped_.m.size());
    if (count == 0) return;
    // Device pointer arrays: A (weights), B (rows), C (outputs), one after another.
    std::vector<const void*>& dev = grouped_.dev;  // kept: the source of an async copy
    dev.resize(grouped_.ptrs.size());
    for (int i = 0; i < count; ++i)
      for (int a = 0; a < 3; ++a) dev[static_cast<size_t>(a) * count + i] = grouped_.ptrs[3 * i + a];
    auto* d = static_cast<const void**>(grouped_ptrs_.get(sizeof(void*) * dev.size(), stream_));
    cuda_check(cudaMemcpyAsync(d, dev.data(), sizeof(void*) * dev.size(), cudaMemcpyHostToDevice,
                               stream_),
               "matmul_grouped (pointers)");
    const std::vector<cublasOperation_t> ta(static_cast<size_t>(count), CUBLAS_OP_T),
        tb(static_cast<size_t>(count), CUBLAS_OP_N);
    const std::vector<float> alpha(static_cast<size_t>(count), 1.0f),
        beta(static_cast<size_t>(count), 0.0f);
    const std::vector<int> ones(static_cast<size_t>(count), 1),
        ldc(static_cast<size_t>(count), static_cast<int>(ldy));
    // Column-major view as in cublas_gemm: yᵀ (N, rows) = W (N, K) · xᵀ (K, rows).
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        cublas_, ta.data(), tb.data(), grouped_.m.data(), grouped_.n.data(), grouped_.k.data(),
        alpha.data(), d, CUDA_R_16BF, grouped_.k.data(), d + count, CUDA_R_16BF,
        grouped_.k.data(), beta.data(), const_cast<void* const*>(d + 2 * count), CUDA_R_32F,
        ldc.data(), count, ones.data(), CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
      grouped_cublas_ok_ = false;
      return Ops::matmul_grouped(x, offsets, n_groups, w, y, ldy, numerics);
    }
    cublas_check(st, "cublasGemmGroupedBatchedEx");
  }

  void moe_group(const int32_t* experts, int32_t n, int32_t k, int32_t n_experts,
                 int32_t* offsets, int32_t* src_row, int32_t* rows) override {
    check(n_experts >= 1 && n_experts <= cuda::kMaxRouteExperts,
          "CUDA moe_group: {} experts, at most {}", n_experts, cuda::kMaxRouteExperts);
    cuda_check(cuda::launch_moe_group(experts, n, k, n_experts, offsets, src_row, rows, stream_),
               "moe_group");
  }

  // Invariant numerics: one grouped kernel reading the offsets on the device (moe_grouped.cu:
  // each row one k16 MMA chain from zero, the invariant GEMM's bits) for up to
  // CudaOptions::moe_grouped_rows rows. Larger steps, fast numerics and the K-split
  // experiments: the offsets come down and matmul_grouped() runs (the same bits, invariant).
  void matmul_grouped_device(const void* x, const int32_t* offsets, int32_t n_groups,
                             int32_t rows_bound, const WeightMatrix* w, float* y, int64_t ldy,
                             NumericsMode numerics) override {
    // FP8 experts: the offsets come down and matmul_grouped() runs them, as above.
    if (gemm_numerics(numerics) == NumericsMode::kFast || gemm_splits_override_ != 0 ||
        (moe_grouped_rows_ >= 0 && rows_bound > moe_grouped_rows_) ||
        (n_groups > 0 && dtype_is_fp8(w[0].dtype)))
      return Ops::matmul_grouped_device(x, offsets, n_groups, rows_bound, w, y, ldy, numerics);
    if (n_groups == 0 || rows_bound == 0) return;
    for (int32_t g = 0; g < n_groups; ++g) {
      check_matmul_args(x, w[g]);
      check(w[g].rows == w[0].rows && w[g].cols == w[0].cols,
            "CUDA matmul_grouped_device: group {} is {}×{}, group 0 {}×{}", g, w[g].rows,
            w[g].cols, w[0].rows, w[0].cols);
    }
    check(ldy >= w[0].rows, "CUDA matmul_grouped_device: row stride {} below {} output features",
          ldy, w[0].rows);
    cuda_check(cuda::launch_grouped_gemm(static_cast<const uint16_t*>(x), offsets, n_groups,
                                         rows_bound, weight_table(w, n_groups),
                                         static_cast<int32_t>(w[0].rows),
                                         static_cast<int32_t>(w[0].cols), y, ldy, stream_),
               "grouped gemm");
  }

  // The device array of the n weights' pointers, uploaded once per weight array (a model's
  // layer keeps its experts' WeightMatrix array for its lifetime; a reused address with other
  // pointers is uploaded again).
  const uint16_t* const* weight_table(const WeightMatrix* w, int32_t n) {
    WeightTable& t = weight_tables_[w];
    bool same = static_cast<int32_t>(t.host.size()) == n;
    for (int32_t g = 0; same && g < n; ++g) same = t.host[static_cast<size_t>(g)] == w[g].data;
    if (!same) {
      t.host.resize(static_cast<size_t>(n));
      for (int32_t g = 0; g < n; ++g) t.host[static_cast<size_t>(g)] = w[g].data;
      if (t.device) free_bytes(t.device);
      t.device = alloc_bytes(sizeof(void*) * static_cast<size_t>(n));
      cuda_check(cudaMemcpyAsync(t.device, t.host.data(), sizeof(void*) * static_cast<size_t>(n),
                                 cudaMemcpyHostToDevice, stream_),
                 "grouped gemm (weight table)");
    }
    return static_cast<const uint16_t* const*>(t.device);
  }

  void gather_rows_rounded(const void* x, int32_t dim, const int32_t* rows, int32_t n_rows,
                           void* out) override {
    cuda_check(cuda::launch_gather_rows_bf16(static_cast<const uint16_t*>(x), dim, rows, n_rows,
                                             static_cast<uint16_t*>(out), stream_),
               "gather_rows_rounded");
  }
  void moe_combine(const float* y, const int32_t* rows, const float* weights, int32_t n, int32_t k,
                   int32_t dim, const float* shared, const float* shared_gate,
                   float* out) override {
    check(shared == nullptr || shared_gate != nullptr,
          "moe_combine: a shared expert's output needs its gate");
    cuda_check(cuda::launch_moe_combine(y, rows, weights, n, k, dim, shared, shared_gate, out,
                                        stream_),
               "moe_combine");
  }

  // Samples on the device (sampling.cu): uploads the rows' params, downloads only the results.
  void sample_rows(const float* logits, int32_t rows, int32_t vocab, const SampleRowParams* params,
                   SampleRowResult* out) override {
    check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
    if (rows == 0) return;
    for (int32_t r = 0; r < rows; ++r) {  // the rows passed SampleRowParams::validate
      check(params[r].score_token < vocab,
            "sampling: score_token {} outside the vocabulary of {} ids", params[r].score_token,
            vocab);
    }
    const size_t params_bytes = sizeof(SampleRowParams) * static_cast<size_t>(rows);
    const size_t results_offset = (params_bytes + 255) / 256 * 256;
    const size_t results_bytes = sizeof(SampleRowResult) * static_cast<size_t>(rows);
    char* io = static_cast<char*>(sample_io_.get(results_offset + results_bytes, stream_));
    auto* d_params = reinterpret_cast<SampleRowParams*>(io);
    auto* d_results = reinterpret_cast<SampleRowResult*>(io + results_offset);
    cuda_check(cudaMemcpyAsync(d_params, params, params_bytes, cudaMemcpyHostToDevice, stream_),
               "sample_rows (params)");
    const cuda::SampleRowsPlan plan =
        cuda::plan_sample_rows(rows, vocab, sample_config_, sm_count_);
    cuda_check(cuda::launch_sample_rows(logits, rows, vocab, d_params, d_results, plan,
                                        sample_scratch_.get(plan.scratch_bytes, stream_), stream_),
               "sample_rows");
    cuda_check(cudaMemcpyAsync(out, d_results, results_bytes, cudaMemcpyDeviceToHost, stream_),
               "sample_rows (results)");
    cuda_check(cudaStreamSynchronize(stream_), "sample_rows (sync)");
    for (int32_t r = 0; r < rows; ++r) {
      check(out[r].status != SampleRowStatus::kNonFiniteLogit,
            "sampling: row {} has a NaN or +inf logit: the model produced a non-finite value", r);
      check(out[r].status != SampleRowStatus::kAllMasked,
            "sampling: every logit of row {} is -inf: no token can be chosen", r);
      const int32_t n_top = std::min(params[r].n_logprobs, vocab);
      check(out[r].token >= 0 && out[r].token < vocab && out[r].n_top == n_top,
            "CUDA sample_rows: internal error in row {} (token {}, {} top logprobs of {})", r,
            out[r].token, out[r].n_top, n_top);
    }
  }

  // Masked rows on the device (masked_sampling.h): the masks up, the results down.
  void sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                          const SampleRowParams* params, RowMasks masks,
                          SampleRowResult* out) override {
    check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
    if (std::none_of(masks.begin, masks.begin + rows, [](int64_t b) { return b >= 0; })) {
      return sample_rows(logits, rows, vocab, params, out);
    }
    masked_sampling_.run(logits, rows, vocab, params, masks, out, sample_config_, sm_count_,
                         stream_);
  }

  // Logit penalties on the device (logit_penalties.cu): the entries up, one thread each.
  void apply_logit_penalties(float* logits, int32_t rows, int32_t vocab,
                             const LogitPenalty* entries, int32_t n) override {
    check(n >= 0, "logit penalties: {} entries", n);
    check_logit_penalties(rows, vocab, {entries, static_cast<size_t>(n)});
    if (n == 0) return;
    const size_t bytes = sizeof(LogitPenalty) * static_cast<size_t>(n);
    auto* d_entries = static_cast<LogitPenalty*>(penalty_io_.get(bytes, stream_));
    cuda_check(cudaMemcpyAsync(d_entries, entries, bytes, cudaMemcpyHostToDevice, stream_),
               "logit penalties (entries)");
    cuda_check(cuda::launch_logit_penalties(logits, vocab, d_entries, n, stream_),
               "logit penalties");
  }

 private:
  int device_;
  NumericsMode mode_;
  int force_attention_split_;
  AttentionForce attention_force_;  // the planner's overrides (any plan gives the same bits)
  DType kv_dtype_;
  int gemm_variant_;  // kGemmVariantFixedTile in the bi-naive mode
  bool fixed_tile_;
  int gemm_splits_override_;
  int32_t moe_grouped_rows_;  // CudaOptions::moe_grouped_rows
  int fp8_wg_splits_;         // CudaOptions::fp8_wg_splits
  int fp8_wg_prefill_variant_;  // CudaOptions::fp8_wg_prefill_variant
  bool fp8_fused_quantize_;   // CudaOptions::fp8_fused_quantize
  Fp8FusedInput fp8_input_;  // announce_gemm_input: whose FP8 rows fp8_act_ holds
  int64_t fp8_fused_reads_ = 0;  // FP8 linears that read their producer's rows (tests)
  std::unique_ptr<cuda::LtGemm> lt_gemm_;  // verified cuBLASLt plans (invariant mode)
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cuda::StagedUpload uploader_;  // upload(): weights through pinned staging
  Scratch x_bf16_, partials_, counters_, attn_, rope_dev_;
  Scratch fp8_act_;                         // FP8 linears: the E4M3 rows of x and their scales
  Scratch fp8_split_;                       // FP8 linears, split k: the runs' chains (m <= 64)
  Scratch fp8_tiles_;  // FP8 linears, split k: each output tile's count of finished runs (zeros)
  static constexpr int32_t kMaxUnitScales = 1024;
  float* unit_scales_ = nullptr;            // FP8 KV: ones, the scales of a cache given none
  std::unique_ptr<cuda::Fp8LtGemm> fp8_lt_;  // FP8 linears, fast numerics (made on first use)
  // Verified cuBLASLt plans of the invariant FP8 GEMM (fp8_plans(): made on first use).
  std::unique_ptr<cuda::LtGemm> fp8_plans_;
  bool fp8_plans_wanted_ = false;
  CudaOptions::GemmPlanCache plan_cache_;  // where the FP8 planner's file goes
  int pdl_mode_ = -1;  // CudaOptions::programmatic_launch
  // Programmatic dependent launch for a kernel of a step of `rows` rows (tokens).
  static constexpr int32_t kPdlMaxRows = 4;
  bool pdl(int32_t rows) const { return pdl_mode_ == 1 || (pdl_mode_ < 0 && rows <= kPdlMaxRows); }
  Scratch y_part_;  // a projection part's output before its columns go into place
  // matmul_grouped's fast path: its host arrays, its device pointer arrays, and whether this
  // cuBLAS runs bf16 grouped GEMMs (false after a CUBLAS_STATUS_NOT_SUPPORTED).
  struct GroupedArrays {
    std::vector<int> m, n, k;
    std::vector<const void*> ptrs;  // (A, B, C) a problem
    std::vector<const void*> dev;   // all A, then all B, then all C: uploaded
    void clear() {
      m.clear();
      n.clear();
      k.clear();
      ptrs.clear();
    }
  } grouped_;
  Scratch grouped_ptrs_;
  bool grouped_cublas_ok_ = true;
  // matmul_grouped_device: each experts' array's device table of weight pointers.
  struct WeightTable {
    std::vector<const void*> host;  // what `device` holds (the source of its async copy)
    void* device = nullptr;
  };
  std::unordered_map<const WeightMatrix*, WeightTable> weight_tables_;
  Scratch sample_io_;  // sample_rows: (rows) SampleRowParams, then (rows) SampleRowResult
  Scratch sample_scratch_;                 // sample_rows: the passes' scratch (sampling.cu)
  cuda::SampleRowsConfig sample_config_;   // CudaOptions::sample_*
  int sm_count_ = 1;                       // the device's SMs (sampling's blocks a row)
  cuda::MaskedSampling masked_sampling_;           // sample_rows_masked
  Scratch penalty_io_;                              // apply_logit_penalties: (n) LogitPenalty
  std::unique_ptr<cuda::CudaGraphCapture> graphs_;  // CUDA graphs on stream_ (cuda_graph.h)
  std::vector<float> rope_host_;
};

}  // namespace

CudaOptions cuda_options_for(const BackendNumerics& numerics, int device) {
  CudaOptions o;
  o.device = device;
  o.mode = numerics.numerics;
  o.gemm_lt = numerics.gemm_lt;
  o.gemm_fixed_tile = numerics.gemm_fixed_tile;
  o.kv_dtype = numerics.kv_dtype == KvDType::kF32   ? DType::kF32
               : numerics.kv_dtype == KvDType::kFP8 ? DType::kF8E4M3
                                                    : DType::kBF16;
  return o;
}

std::vector<std::string> cuda_gemm_plan_report(const Ops& ops) {
  std::vector<std::string> out;
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  if (c == nullptr) return out;
  for (const auto& r : c->gemm_plans())
    out.push_back(
        fmt::format("{}{}x{} M<={} (tuned at {}): {} | {} of {} cuBLASLt candidates "
                    "bit-equal | kernel {:.1f} us, chosen {:.1f} us{}{}",
                    r.operands == cuda::LtOperands::kFp8E4M3 ? "fp8 " : "", r.k, r.n, r.bucket,
                    r.tuned_m, r.choice, r.bit_equal, r.candidates, r.kernel_us,
                    r.chosen_us,
                    r.swept_ms == 0 ? std::string()
                                    : fmt::format(" | verified at {} m (tiles of {} rows)",
                                                  r.swept_ms, r.sweep_granule),
                    r.swept_out == 0
                        ? std::string()
                        : fmt::format(" | {} faster one(s) differed inside the bucket (first at "
                                      "m = {})",
                                      r.swept_out, r.first_swept_out_m)));
  return out;
}

int64_t cuda_fp8_fused_reads(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  return c == nullptr ? 0 : c->fp8_fused_reads();
}

int cuda_gemm_lt_plan_count(const Ops& ops) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  if (c == nullptr) return 0;
  int n = 0;
  for (const auto& r : c->gemm_plans()) n += r.choice != "invariant-kernel";
  return n;
}

CudaGemmPlanFileSummary cuda_gemm_plan_file_summary(const Ops& ops) {
  CudaGemmPlanFileSummary out;
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  if (c == nullptr) return out;
  out.plans = static_cast<int>(c->gemm_plans().size());
  // The bf16 planner's file, then the FP8 planner's (counts added, paths joined by " + ").
  for (const cuda::LtPlanFileStats* st : c->gemm_plan_file_stats()) {
    if (!st->path.empty()) out.path += (out.path.empty() ? "" : " + ") + st->path;
    out.reverified += st->reverified;
    out.kernel_from_file += st->kernel_from_file;
    out.rejected += st->rejected;
    out.tuned += st->tuned;
    out.saves += st->saves;
    out.warnings.insert(out.warnings.end(), st->warnings.begin(), st->warnings.end());
  }
  return out;
}

std::unique_ptr<Ops> make_cuda_ops(const CudaOptions& options) {
  return std::make_unique<CudaOps>(options);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string cuda_device_description(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "unknown CUDA device";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return fmt::format("{} (sm_{}{}, {} SMs, driver {}, runtime {})", prop.name, prop.major,
                     prop.minor, prop.multiProcessorCount, driver, runtime);
}

std::string cuda_fp8_gemm_rule(int wg_splits, DType weights) {
  if (weights == DType::kF8E4M3B128)
    return fmt::format("fp8-gemm=x-bf16/token;{}", cuda::kFp8GemmWgB128NumericsRule);
  if (weights == DType::kF8E4M3G128)
    return fmt::format("fp8-gemm=x-bf16/token-group128;{}", cuda::kFp8GemmWgG128NumericsRule);
  if (wg_splits < 0)  // the per-shape rule: the split of each shape follows from the device
    return fmt::format("fp8-gemm=x-bf16/token;{};splits=per-shape-one-wave(max {})",
                       cuda::kFp8GemmWgSplitNumericsRule, cuda::kFp8GemmWgSplitAutoMax);
  if (wg_splits > 1)
    return fmt::format("fp8-gemm=x-bf16/token;{};splits={}", cuda::kFp8GemmWgSplitNumericsRule,
                       wg_splits);
  return fmt::format("fp8-gemm=x-bf16/token;{}", cuda::kFp8GemmWgNumericsRule);
}

}  // namespace detllm::kernels
