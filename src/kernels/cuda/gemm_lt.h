// Verified cuBLASLt executions of the invariant GEMMs (design.md Rule 1: kernel selection may
// change with M only among kernels shown to give identical bits) — the bf16 GEMM and the FP8
// GEMM of per-channel FP8 weights, one planner each (LtOperands).
//
// bf16: the invariant GEMM's numerics are fixed by the weight shape: S = gemm_split_count(n, k)
// equal K splits (today S = 1), each a k16 MMA chain in ascending k from zero, merged left to
// right. cuBLASLt can run the same sequence — an algorithm with its split-K count forced to S
// (any reduction scheme), or S unsplit calls over the K slices chained through beta = 1 — and
// its Hopper kernels (wgmma, TMA, clusters) are 3–5× faster than our mma.sync kernel at large
// M.
// FP8 (kernels/cuda/fp8_launch.h, launch_fp8_gemm_wg_split): k in the shape's S' runs of
// 128-column tiles, each run's wgmma chain promoted to fp32 every 128 columns, the runs added in
// ascending order, then · x_scale[r] · w_scale[c]. cuBLASLt's FP8 matmul without fast
// accumulation can run the same: one unscaled call per run chained through beta = 1 (D = acc +
// D), then launch_fp8_scale_outer. (A matrix with a bias always runs the kernel.)
// Nothing documents that cuBLASLt's per-element order matches ours, so nothing is trusted: for
// each (n, k, M bucket) the planner runs every candidate on random activations with the
// layer's real weights at two M of the bucket, keeps only those whose every output bit equals
// the invariant kernel's, times them against the kernel, and keeps the fastest one that also
// gives the kernel's bits at both ends of every tile count between (gemm_sweep_ms; the GPU
// tests check every m). A plan never changes bits, only speed; if a library update changed
// cuBLASLt's order, no candidate would pass and the kernel would run. When no plan exists yet
// and the stream is being captured into a CUDA graph, the kernel runs too (same bits).
//
// Plans persist (kernels/gemm_plan_file.h) in a file keyed by the GPU (name + UUID), driver,
// CUDA runtime, cuBLASLt version, the GEMM numerics rule and the workspace (the FP8 planner's
// key names its rule, so its file is another). A persisted
// cuBLASLt execution is never trusted: before use it passes the same two-M bit comparison
// against the invariant kernel as a tuned one (no timing); a mismatch, a missing entry or an
// unusable file falls back to a full tune, and the file is rewritten.
// Measured: benchmarks/cuda_gemm_lt_bench (every candidate, bits and time), cuda_fp8_lt_bench
// (FP8), docs/cuda.md.
// Tests: tests/cuda/cuda_gemm_invariance_test.cpp (rows equal across M = 1…8192 with plans on),
// tests/cuda/cuda_gemm_plan_cache_test.cpp (save, reload, re-verification, tampered entries),
// tests/cuda/cuda_fp8_plan_test.cpp (FP8: the planned GEMM's bits at every m, a wrong run order
// refused, the plan file).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gemm_plan_file.h"

namespace detllm::kernels::cuda {

// Which invariant GEMM a planner serves.
enum class LtOperands {
  kBf16,     // x, w bf16 (launch_gemm_invariant's numerics)
  kFp8E4M3,  // x, w E4M3 codes with per-row and per-channel fp32 scales (the split FP8 GEMM)
};

// What the planner chose for one (n, k, bucket), for benchmarks and logs.
struct LtPlanReport {
  LtOperands operands = LtOperands::kBf16;
  int64_t n = 0, k = 0;
  int32_t bucket = 0;    // plans cover m in (gemm_bucket_below(bucket), bucket]
  int32_t tuned_m = 0;   // rows used to verify and time (≤ bucket)
  std::string choice;    // "invariant-kernel", "lt-splitk …" or "lt-chain …"
  int candidates = 0;    // cuBLASLt executions tried
  int bit_equal = 0;     // … of which every output bit equalled the invariant kernel's
  double kernel_us = 0;  // invariant kernel time at tuned_m
  double chosen_us = 0;  // chosen execution's time at tuned_m
  bool from_file = false;  // taken from the plan file (re-verified if cuBLASLt; not timed)
  // The chosen cuBLASLt execution was also verified between the two m the candidates are
  // screened at (both ends of every tile count up to tuned_m, LtGemm::sweep): executions
  // that passed the screen but differed at such an m (each then skipped for the next fastest),
  // and the first such m.
  int swept_out = 0;
  int32_t first_swept_out_m = 0;
  // The chosen cuBLASLt execution's sweep: its tiles' granule along m and the m it ran.
  int32_t sweep_granule = 0;
  int32_t swept_ms = 0;
};

// What the plan file did in this process (tests and the startup progress lines).
struct LtPlanFileStats {
  std::string path;          // "" when plans are not persisted
  int entries_loaded = 0;    // entries of a usable file for this key
  int reverified = 0;        // persisted cuBLASLt plans whose bits passed, then used
  int rejected = 0;          // persisted plans that failed a check (then tuned again)
  int kernel_from_file = 0;  // persisted "invariant kernel" plans (nothing to verify)
  int tuned = 0;             // plans tuned in full (missing or rejected entries)
  int saves = 0;             // times the file was written
  std::vector<std::string> warnings;  // an unusable file, a rejected entry, a failed write
};

class LtGemm {
 public:
  // Runs the invariant kernel: y (m, n) = x (m, k) fp32 · wᵀ, on the planner's stream.
  using KernelFn = std::function<cudaError_t(const float* x, int32_t m, const uint16_t* w,
                                             int64_t n, int64_t k, float* y)>;
  // Runs the invariant FP8 GEMM (launch_fp8_gemm_wg_split with the shape's split, no bias):
  // y (m, n) = (Σ_k dec(xq) · dec(w)) · x_scale[r] · w_scale[c], on the planner's stream.
  using Fp8KernelFn =
      std::function<cudaError_t(const uint8_t* xq, const float* x_scale, int32_t m,
                                const uint8_t* w, const float* w_scale, int64_t n, int64_t k,
                                float* y)>;
  // The number of k runs S' the FP8 kernel sums for a shape (fp8_gemm_wg_split_runs of its
  // split): a function of the shape and the device, never of m.
  using Fp8RunsFn = std::function<int32_t(int64_t n, int64_t k)>;

  // bf16. plan_file: where plans persist ("" = nowhere). Read here; written after every tune.
  LtGemm(cudaStream_t stream, KernelFn kernel, std::string plan_file = "");
  // FP8 (per-channel weights).
  LtGemm(cudaStream_t stream, Fp8KernelFn kernel, Fp8RunsFn runs, std::string plan_file = "");
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Whether the (n, k, bucket(m)) plan runs on cuBLASLt; tunes the plan first if there is
  // none (not while the stream is being captured: then false, and the kernel runs).
  bool prefers_lt(int32_t m, const uint16_t* w, int64_t n, int64_t k);
  // y = x·wᵀ without bias through the plan (prefers_lt() must have said true). x_bf16 is x
  // rounded to bf16 (m × k). Returns false if cuBLASLt refused the call: run the kernel then.
  bool run(const uint16_t* x_bf16, int32_t m, const uint16_t* w, int64_t n, int64_t k, float* y);
  // The same for the FP8 planner: w (n, k) E4M3 codes with w_scale (n); xq (m, k) with
  // x_scale (m). 16-byte aligned, k % 16 == 0.
  bool prefers_lt(int32_t m, const uint8_t* w, const float* w_scale, int64_t n, int64_t k);
  bool run(const uint8_t* xq, const float* x_scale, int32_t m, const uint8_t* w,
           const float* w_scale, int64_t n, int64_t k, float* y);

  std::vector<LtPlanReport> reports() const;
  const LtPlanFileStats& plan_file_stats() const { return file_stats_; }

  // What a plan file must have been written for, on the current device: "gpu=…;uuid=…;
  // driver=…;runtime=…;cublaslt=…;gemm=…;kernels=…;workspace=…" (FP8: gemm= names the FP8
  // rule, and the key says operands=fp8-e4m3).
  static std::string plan_file_key(LtOperands operands = LtOperands::kBf16);

 private:
  struct Exec;     // a verified execution: an algorithm and how it is called
  struct Plan;
  struct Session;  // one shape and bucket's activations, reference output and timer
  struct Weight {  // the layer's weight (codes and scales for FP8)
    const void* w = nullptr;
    const float* scale = nullptr;
  };
  struct Acts {  // cuBLASLt's activations of one call (codes and scales for FP8)
    const void* x = nullptr;
    const float* scale = nullptr;
  };
  struct KRun {  // one summand of the invariant GEMM: k in [k0, k0 + kz)
    int64_t k0 = 0, kz = 0;
  };
  using Key = std::tuple<int64_t, int64_t, int32_t>;  // (n, k, bucket)

  LtGemm(cudaStream_t stream, LtOperands operands, std::string plan_file);
  bool prefers(int32_t m, Weight w, int64_t n, int64_t k);
  bool run_plan(Acts x, int32_t m, Weight w, int64_t n, int64_t k, float* y);
  // The invariant GEMM's k runs of a shape, ascending: S equal slices (bf16) or S' runs of
  // 128-column tiles, the last one shorter (FP8).
  std::vector<KRun> k_runs(int64_t n, int64_t k) const;
  // The invariant kernel on the session's activations.
  cudaError_t reference(const Session& s, int32_t m, Weight w, int64_t n, int64_t k, float* y);
  Plan& tune(Weight w, int64_t n, int64_t k, int32_t bucket);
  std::unique_ptr<Plan> new_plan(int64_t n, int64_t k, int32_t bucket) const;
  // The persisted plan of (n, k, bucket) after its checks, or nullptr (then tune in full).
  std::unique_ptr<Plan> plan_from_file(Weight w, int64_t n, int64_t k, int32_t bucket);
  // Every candidate verified and timed; the fastest bit-equal one (or the kernel) chosen.
  void tune_fully(Plan& p, Session& s, Weight w);
  std::vector<Exec> candidates(const Plan& p, int32_t m) const;
  std::vector<cublasLtMatmulAlgo_t> heuristic_algos(const Plan& p, int32_t m, int64_t kk) const;
  // Sets split-K and the reduction scheme; cuBLASLt must accept `a` for every k extent kks.
  bool configure(const Plan& p, cublasLtMatmulAlgo_t& a, uint32_t splitk, uint32_t reduction,
                 int32_t m, const std::vector<int64_t>& kks) const;
  // cuBLASLt accepts `a` for the problem (m rows, K slices of kk) within our workspace.
  bool algo_usable(const Plan& p, const cublasLtMatmulAlgo_t& a, int32_t m, int64_t kk) const;
  // An execution of the shape: its calls' k windows made once (k_runs for a chain).
  Exec exec(bool chain, int splits, const cublasLtMatmulAlgo_t& algo, int64_t n, int64_t k) const;
  // The distinct k extents of e's calls.
  static std::vector<int64_t> call_extents(const Exec& e);
  // Every output bit of e equals the invariant kernel's, at the session's two M.
  bool bit_equal(const Plan& p, const Exec& e, Session& s, Weight w);
  // e run at the m of the bucket up to s.m that decide its bits (gemm_sweep_ms: both ends of
  // every tile count of e's tiles, every m when the tile is unknown) against the reference.
  struct Sweep {
    int32_t first_differing_m = 0;  // 0: every m gave the reference's bits
    int32_t granule = 0, n_ms = 0;  // e's tile granule along m, the m run
  };
  Sweep sweep(const Plan& p, const Exec& e, Session& s, Weight w);
  double time_us(Session& s, const std::function<cudaError_t()>& call);
  cudaError_t launch(cublasLtMatmulDesc_t op, const Exec& e, Acts x, int32_t m, Weight w,
                     int64_t n, int64_t k, float* y);
  void load_plan_file();
  void save_plan_file();
  void warn(std::string message);

  cudaStream_t stream_;
  LtOperands operands_;
  KernelFn kernel_;          // bf16
  Fp8KernelFn fp8_kernel_;   // FP8
  Fp8RunsFn fp8_runs_;       // FP8
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;  // fixed: never reallocated (CUDA-graph safe)
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::string plan_file_;        // "" = not persisted
  std::string plan_file_key_;
  // Persisted plans not used yet (kept when the file is rewritten: other shapes, buckets).
  std::map<Key, GemmPlanEntry> from_file_;
  LtPlanFileStats file_stats_;
};

// The bucket of m (kernels/gemm_buckets.h; larger m than 8192 use the 8192 plan).
int32_t lt_bucket(int32_t m);

}  // namespace detllm::kernels::cuda
