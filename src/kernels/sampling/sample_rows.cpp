// The host default of Ops::sample_rows (kernels/ops.h): each row through the CPU sampler
// (kernels/sampling/sampler.h), downloading the row first when the backend's memory is not host memory.
// Device backends override it (kernels/cuda/sampling.cu). Test: tests/kernels/sampler_test.cpp.
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm::kernels {

void Ops::sample_rows(const float* logits, int32_t rows, int32_t vocab,
                      const SampleRowParams* params, SampleRowResult* out) {
  check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
  std::vector<float> host_row;
  for (int32_t r = 0; r < rows; ++r) {
    const float* row = logits + static_cast<size_t>(r) * static_cast<size_t>(vocab);
    if (!host_memory()) {
      host_row.resize(static_cast<size_t>(vocab));
      download(host_row.data(), row, sizeof(float) * host_row.size());
      row = host_row.data();
    }
    out[r] = sample_row(std::span<const float>(row, static_cast<size_t>(vocab)), params[r]);
  }
}

}  // namespace detllm::kernels
