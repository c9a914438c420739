// The host default of Ops::sample_rows (kernels/ops.h): each row through the CPU sampler
// (kernels/sampling/sampler.h: sample_rows_host), downloading the row first when the backend's
// memory is not host memory.
// Device backends override it (kernels/cuda/sampling.cu). Test: tests/kernels/sampler_test.cpp.
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm {

void sample_rows_host(const float* logits, int32_t rows, int32_t vocab,
                      const SampleRowParams* params, SampleRowResult* out) {
  check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
  const size_t n = static_cast<size_t>(vocab);
  for (int32_t r = 0; r < rows; ++r) {
    out[r] = sample_row(std::span<const float>(logits + static_cast<size_t>(r) * n, n), params[r]);
  }
}

namespace kernels {

void Ops::sample_rows(const float* logits, int32_t rows, int32_t vocab,
                      const SampleRowParams* params, SampleRowResult* out) {
  if (host_memory()) return sample_rows_host(logits, rows, vocab, params, out);
  check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
  std::vector<float> host_row;
  for (int32_t r = 0; r < rows; ++r) {
    host_row.resize(static_cast<size_t>(vocab));
    download(host_row.data(), logits + static_cast<size_t>(r) * static_cast<size_t>(vocab),
             sizeof(float) * host_row.size());
    out[r] = sample_row(std::span<const float>(host_row), params[r]);
  }
}

}  // namespace kernels
}  // namespace detllm
