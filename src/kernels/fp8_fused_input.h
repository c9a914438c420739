// Which GEMM input's FP8 rows a backend holds, for Ops::announce_gemm_input: the model names the
// matrix that reads the next producer's output; the producer (add_rmsnorm, silu_mul_rows) then
// writes the rows' FP8 form beside its bf16 output, and the FP8 linears of that matrix's rule
// on that input read it instead of quantizing. This is the bookkeeping alone — no memory, no
// kernel — so that the one way it could go wrong, a linear reading codes of other values, is
// decided by small rules tested on the host (tests/kernels/fp8_fused_input_test.cpp):
//   - an announcement is used up by the next producer, whatever it writes;
//   - a producer forgets the input held before (it may be writing over it);
//   - the input is held only for the producer of the announced output, with the announced k;
//   - a linear reads it only for the same input, row count, k and activation rule;
//   - anything else that writes a GEMM input or the FP8 rows' storage — a copy, the
//     attention's output, a linear's own quantizer — forgets it (forget()).
// The CUDA backend (kernels/cuda/cuda_ops.cpp) keeps one.
#pragma once

#include <cstdint>

namespace detllm::kernels {

class Fp8FusedInput {
 public:
  // The next producer's output `out` is read by a linear of k columns whose activation rule is
  // `rule` (an identity: the matrix's parameters in device memory).
  void announce(const void* out, int64_t k, const void* rule) { announced_ = {out, rule, 0, k}; }

  // A producer is about to write `out` (n rows of k): the rule whose FP8 rows it is to write
  // as well, or nullptr when it writes the bf16 rows alone. Uses up the announcement and
  // forgets the input held before; with a rule, that input (out, n, k, rule) is held after.
  const void* produce(const void* out, int32_t n, int64_t k) {
    const Entry a = announced_;
    announced_ = {};
    ready_ = {};
    if (a.x == nullptr || a.x != out || a.k != k || n <= 0 || a.rule == nullptr) return nullptr;
    ready_ = {out, a.rule, n, k};
    return a.rule;
  }

  // Whether a linear of `rule` reading x (m rows of k) may take the held FP8 rows.
  bool holds(const void* x, int32_t m, int64_t k, const void* rule) const {
    return ready_.x != nullptr && ready_.x == x && ready_.m == m && ready_.k == k &&
           ready_.rule == rule;
  }

  // Something other than the producer wrote a GEMM input or the FP8 rows' storage.
  void forget() { ready_ = {}; }
  // An announcement withdrawn (its reader quantizes no rows, or fusion is off).
  void withdraw() { announced_ = {}; }

 private:
  struct Entry {
    const void* x = nullptr;
    const void* rule = nullptr;
    int32_t m = 0;
    int64_t k = 0;
  };
  Entry announced_, ready_;
};

}  // namespace detllm::kernels
