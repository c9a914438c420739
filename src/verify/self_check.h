// The startup self-check (design.md Rule 3): runs the backend's selected kernels — GEMM on the
// model's weight shapes, paged attention on its head geometry, RMSNorm — on random data at
// several batch sizes M, chunkings and page layouts, and compares the fp32 outputs bit for bit.
// A failure means this machine's kernels (driver, library, build) no longer give batch-invariant
// bits; the engine then refuses deterministic requests (EngineConfig::self_check).
// Tests: tests/conformance/self_check_test.cpp (CPU + negative controls),
//        tests/cuda/cuda_self_check_test.cpp (H200: invariant passes, default cuBLAS fails).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "determinism/self_check_verdict.h"

namespace detllm {

struct ModelConfig;
namespace kernels {
class Ops;
}

// One GEMM shape y (m, n) = x (m, k) · W (n, k)ᵀ (+ bias), checked for m up to max_m.
struct SelfCheckGemm {
  std::string name;     // the model weights with this shape, e.g. "q_proj,o_proj"
  int32_t n = 0;        // out features (weight rows)
  int32_t k = 0;        // in features (weight columns)
  int32_t max_m = 256;  // the reference batch; smaller batches must give its rows' bits
  bool bias = false;    // add a bias (qkv bias models)
  // The weight as FP8 rows of type fp8_rows (dynamic activations: per token, or per token and
  // 128 columns for kF8E4M3G128): a model whose projections are FP8 runs the backend's FP8
  // linear on them, so that is what is checked.
  bool fp8 = false;
  DType fp8_rows = DType::kF8E4M3;  // kF8E4M3 (per channel), kF8E4M3B128 or kF8E4M3G128
};

// One attention geometry: a sequence of `length` positions on a paged cache.
struct SelfCheckAttention {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // the engine's KV block size
  int32_t length = 300;     // > 2 KV splits of 128 positions (CUDA), many blocks
};

struct SelfCheckOptions {
  std::vector<SelfCheckGemm> gemms;
  std::vector<SelfCheckAttention> attention;
  std::vector<int32_t> rmsnorm_dims;  // row lengths (dim; head_dim with q/k norm)
  int32_t rmsnorm_max_rows = 130;
  uint64_t seed = 0x5e1fc4ecull;
};

// The checks for a model: its distinct GEMM shapes (q/k/v, o, gate/up, down at max_m 256;
// lm_head at max_m 16, which bounds the cost of the widest GEMM), its attention geometry with
// the engine's block size, RMSNorm over dim (and head_dim with q/k norm). On the CPU with
// SmolLM2-135M the whole check takes a fraction of a second. fp8_projections: the model's
// projections are FP8 rows (LlamaModel::fp8_projections) of type fp8_rows
// (LlamaModel::fp8_projection_rows): their GEMMs are checked as FP8 of that type (lm_head,
// kept as stored, is not).
SelfCheckOptions self_check_options_for(const ModelConfig& config, int32_t block_size = 16,
                                        bool fp8_projections = false,
                                        DType fp8_rows = DType::kF8E4M3);

// The first output element whose bits differ from the reference computation.
struct SelfCheckMismatch {
  std::string variant;  // what was compared with the reference, e.g. "m=8 vs m=256"
  int64_t row = 0;      // GEMM/RMSNorm: row of the reference batch; attention: position
  int64_t column = 0;   // element within the row
  float reference = 0.0f;
  float value = 0.0f;  // the variant's value
};

struct SelfCheckResult {
  std::string name;  // e.g. "gemm q_proj,o_proj 4096->4096", "attention 32/8x128 ..."
  bool passed = false;
  int32_t n_variants = 0;                     // computations compared with the reference
  std::optional<SelfCheckMismatch> mismatch;  // the first one, when it failed on bits
  std::string error;                          // when an op threw (counts as a failure)
  double elapsed_ms = 0.0;

  // "m=8 vs m=256: row 3 column 17: 0.123456789 vs 0.123456791" / the error / "".
  std::string failure() const;
};

struct SelfCheckReport {
  std::string backend;  // Ops::name()
  std::vector<SelfCheckResult> checks;
  double elapsed_ms = 0.0;

  bool passed() const;
  int32_t n_failed() const;
  const SelfCheckResult* first_failure() const;  // nullptr when it passed
  // One line: "9 checks passed in 0.41 s (cpu)" or
  // "FAILED 1 of 9 checks (cpu): gemm o_proj 4096->4096: m=1 vs m=256: row 0 column 0: …".
  std::string summary() const;
  // A table, one line per check (name, status, variants, ms, first mismatch), then summary().
  std::string describe() const;
};

// Runs every check of `opts` on `ops` (host or device backend: data moves through the ops'
// memory functions). Never throws for a kernel failure: an op that throws fails its check.
SelfCheckReport run_self_check(kernels::Ops& ops, const SelfCheckOptions& opts);

// What the engine needs to know of the self-check.
}  // namespace detllm
