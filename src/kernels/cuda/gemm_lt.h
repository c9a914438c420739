// Verified cuBLASLt executions of the invariant GEMM (design.md Rule 1: kernel selection may
// change with M only among kernels shown to give identical bits).
//
// The invariant GEMM's numerics are fixed by the weight shape: S = gemm_split_count(n, k)
// equal K splits (today S = 1), each a k16 MMA chain in ascending k from zero, merged left to
// right. cuBLASLt can run the same sequence — an algorithm with its split-K count forced to S
// (any reduction scheme), or S unsplit calls over the K slices chained through beta = 1 — and
// its Hopper kernels (wgmma, TMA, clusters) are 3–5× faster than our mma.sync kernel at large
// M. Nothing documents that their per-element order matches ours, so nothing is trusted: for
// each (n, k, M bucket) the planner runs every candidate on random activations with the
// layer's real weights at two M of the bucket, keeps only those whose every output bit equals
// launch_gemm_invariant's, times them against the invariant kernel, and keeps the fastest one
// that also gives the kernel's bits at both ends of every tile count between (gemm_sweep_ms;
// the GPU tests check every m). A
// plan never changes bits, only speed; if a library update changed cuBLASLt's order, no
// candidate would pass and the kernel would run. When no plan exists yet and the stream is
// being captured into a CUDA graph, the kernel runs too (same bits).
//
// Plans persist (kernels/gemm_plan_file.h) in a file keyed by the GPU (name + UUID), driver,
// CUDA runtime, cuBLASLt version, the GEMM numerics rule and the workspace. A persisted
// cuBLASLt execution is never trusted: before use it passes the same two-M bit comparison
// against the invariant kernel as a tuned one (no timing); a mismatch, a missing entry or an
// unusable file falls back to a full tune, and the file is rewritten.
// Measured: benchmarks/cuda_gemm_lt_bench (every candidate, bits and time), docs/cuda.md.
// Tests: tests/cuda/cuda_gemm_invariance_test.cpp (rows equal across M = 1…8192 with plans on),
// tests/cuda/cuda_gemm_plan_cache_test.cpp (save, reload, re-verification, tampered entries).
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

// What the planner chose for one (n, k, bucket), for benchmarks and logs.
struct LtPlanReport {
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

  // plan_file: where plans persist ("" = nowhere). Read here; written after every full tune.
  LtGemm(cudaStream_t stream, KernelFn kernel, std::string plan_file = "");
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Whether the (n, k, bucket(m)) plan runs on cuBLASLt; tunes the plan first if there is
  // none (not while the stream is being captured: then false, and the kernel runs).
  bool prefers_lt(int32_t m, const uint16_t* w, int64_t n, int64_t k);
  // y = x·wᵀ without bias through the plan (prefers_lt() must have said true). x_bf16 is x
  // rounded to bf16 (m × k). Returns false if cuBLASLt refused the call: run the kernel then.
  bool run(const uint16_t* x_bf16, int32_t m, const uint16_t* w, int64_t n, int64_t k, float* y);

  std::vector<LtPlanReport> reports() const;
  const LtPlanFileStats& plan_file_stats() const { return file_stats_; }

  // What a plan file must have been written for, on the current device: "gpu=…;uuid=…;
  // driver=…;runtime=…;cublaslt=…;gemm=…;kernels=…;workspace=…".
  static std::string plan_file_key();

 private:
  struct Exec;     // a verified execution: an algorithm and how it is called
  struct Plan;
  struct Session;  // one shape and bucket's activations, reference output and timer
  using Key = std::tuple<int64_t, int64_t, int32_t>;  // (n, k, bucket)

  Plan& tune(const uint16_t* w, int64_t n, int64_t k, int32_t bucket);
  std::unique_ptr<Plan> new_plan(int64_t n, int64_t k, int32_t bucket) const;
  // The persisted plan of (n, k, bucket) after its checks, or nullptr (then tune in full).
  std::unique_ptr<Plan> plan_from_file(const uint16_t* w, int64_t n, int64_t k, int32_t bucket);
  // Every candidate verified and timed; the fastest bit-equal one (or the kernel) chosen.
  void tune_fully(Plan& p, Session& s, const uint16_t* w);
  std::vector<Exec> candidates(const Plan& p, int32_t m) const;
  std::vector<cublasLtMatmulAlgo_t> heuristic_algos(const Plan& p, int32_t m, int64_t kk) const;
  bool configure(const Plan& p, cublasLtMatmulAlgo_t& a, uint32_t splitk, uint32_t reduction,
                 int32_t m, int64_t kk) const;
  // cuBLASLt accepts `a` for the problem (m rows, K slices of kk) within our workspace.
  bool algo_usable(const Plan& p, const cublasLtMatmulAlgo_t& a, int32_t m, int64_t kk) const;
  // Every output bit of e equals the invariant kernel's, at the session's two M.
  bool bit_equal(const Plan& p, const Exec& e, Session& s, const uint16_t* w);
  // e run at the m of the bucket up to s.m that decide its bits (gemm_sweep_ms: both ends of
  // every tile count of e's tiles, every m when the tile is unknown) against the reference.
  struct Sweep {
    int32_t first_differing_m = 0;  // 0: every m gave the reference's bits
    int32_t granule = 0, n_ms = 0;  // e's tile granule along m, the m run
  };
  Sweep sweep(const Plan& p, const Exec& e, Session& s, const uint16_t* w);
  double time_us(Session& s, const std::function<cudaError_t()>& call);
  cudaError_t launch(cublasLtMatmulDesc_t op, const Exec& e, const uint16_t* x_bf16, int32_t m,
                     const uint16_t* w, int64_t n, int64_t k, float* y);
  void load_plan_file();
  void save_plan_file();
  void warn(std::string message);

  cudaStream_t stream_;
  KernelFn kernel_;
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
