// The CPU backend: make_cpu_ops(n_threads) binds the per-op AVX2 kernels (one file pair each)
// to one persistent ThreadPool. Threads split rows and output features, never a reduction.
// Test: build/tests/test_kernels; bench: build/benchmarks/kernels_bench.
#include <algorithm>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kv.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_fp8.h"
#include "kernels/cpu/matmul_q8.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/ops.h"
#include "kernels/ref/q8_act_ref.h"

namespace detllm::kernels {
namespace {

class CpuOps final : public Ops {
 public:
  CpuOps(int n_threads, CpuActivations act, bool kv_fp8)
      : pool_(n_threads), act_(act), kv_fp8_(kv_fp8) {}

  std::string_view name() const override { return act_ == CpuActivations::kQ8 ? "cpu-q8" : "cpu"; }
  // fp32, f16, bf16 and every block type (matmul.cpp decodes blocks in registers).
  bool reads_weight_dtype(DType) const override { return true; }
  bool kv_fp8() const override { return kv_fp8_; }

  void embedding(const WeightMatrix& table, const int32_t* ids, int32_t n, float* out) override {
    cpu::embedding(pool_, table, ids, n, out);
  }
  void rmsnorm(const float* x, const float* w, int32_t n, int32_t dim, float eps,
               float* out) override {
    cpu::rmsnorm(pool_, x, w, n, dim, eps, out);
  }
  // numerics: one kernel serves both (invariant by construction).
  void matmul(const float* x, int32_t m, const WeightMatrix& w, const float* bias, float* y,
              NumericsMode /*numerics*/) override {
    if (dtype_is_fp8(w.dtype)) {
      cpu::matmul_fp8(pool_, x, m, w, bias, y);  // FP8 weights: activations rounded per token
    } else if (act_ == CpuActivations::kQ8 && ref::q8_act_weight_dtype(w.dtype)) {
      cpu::matmul_q8(pool_, x, m, w, bias, y);
    } else {
      cpu::matmul(pool_, x, m, w, bias, y);
    }
  }
  void rope(float* x, int32_t n, int32_t n_heads, int32_t head_dim, const int32_t* positions,
            const RopeTable& table) override {
    cpu::rope(pool_, x, n, n_heads, head_dim, positions, table);
  }
  void kv_append(const float* k, const float* v, const StepBatch& batch,
                 const KvCacheLayer& cache) override {
    cpu::kv_append(pool_, k, v, batch, cache);
  }
  void attention(const float* q, const KvCacheLayer& cache, const StepBatch& batch, int32_t n_heads,
                 float scale, float* out) override {
    cpu::attention(pool_, q, cache, batch, n_heads, scale, out);
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cpu::silu_mul(pool_, gate, up, n, out);
  }
  void add(float* x, const float* y, int64_t n) override { cpu::add(pool_, x, y, n); }

 private:
  ThreadPool pool_;
  CpuActivations act_;
  bool kv_fp8_;
};

}  // namespace

// n_threads: >= 1, or 0 for every hardware thread.
std::unique_ptr<Ops> make_cpu_ops(int n_threads, CpuActivations act, bool kv_fp8) {
  // The kernels are built for x86-64-v3 (AVX2, FMA, F16C: the fixed SIMD width of the
  // numerics); on an older CPU refuse here rather than die on an illegal instruction later.
  check(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c"),
        "cpu backend: this CPU lacks AVX2/FMA/F16C, which this build ({}) requires",
        DETLLM_CPU_ARCH);
  check(n_threads >= 0, "cpu backend: n_threads must be >= 0 (0 = all cores), got {}", n_threads);
  if (n_threads == 0)
    n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::make_unique<CpuOps>(n_threads, act, kv_fp8);
}

}  // namespace detllm::kernels
