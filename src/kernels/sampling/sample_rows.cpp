// The host defaults of Ops::sample_rows and Ops::sample_rows_masked (kernels/ops.h): each row
// through the CPU sampler (kernels/sampling/sampler.h: sample_rows_host; masked rows through
// sample_allowed, kernels/sampling/masked_sample.h), downloading the row first when the
// backend's memory is not host memory.
// Device backends override it (kernels/cuda/sampling.cu). Test: tests/kernels/sampler_test.cpp.
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/sampling/masked_sample.h"
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
namespace {

// Row r of logits (rows, vocab) in ops' memory, readable on the host: in place when that memory
// is the host's, else downloaded into `buffer`.
std::span<const float> row_on_host(Ops& ops, const float* logits, int32_t r, int32_t vocab,
                                   std::vector<float>& buffer) {
  const size_t n = static_cast<size_t>(vocab);
  const float* src = logits + static_cast<size_t>(r) * n;
  if (ops.host_memory()) return {src, n};
  buffer.resize(n);
  ops.download(buffer.data(), src, sizeof(float) * n);
  return buffer;
}

}  // namespace

void Ops::sample_rows(const float* logits, int32_t rows, int32_t vocab,
                      const SampleRowParams* params, SampleRowResult* out) {
  if (host_memory()) return sample_rows_host(logits, rows, vocab, params, out);
  check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
  std::vector<float> host_row;
  for (int32_t r = 0; r < rows; ++r) {
    out[r] = sample_row(row_on_host(*this, logits, r, vocab, host_row), params[r]);
  }
}

void Ops::sample_rows_masked(const float* logits, int32_t rows, int32_t vocab,
                             const SampleRowParams* params, RowMasks masks,
                             SampleRowResult* out) {
  check(rows >= 0 && vocab > 0, "sample_rows: bad shape ({} rows, vocab {})", rows, vocab);
  const size_t n = static_cast<size_t>(vocab);
  const size_t n_words = (n + 31) / 32;
  std::vector<float> host_row;
  AllowedScratch scratch;
  for (int32_t r = 0; r < rows; ++r) {
    const std::span<const float> row = row_on_host(*this, logits, r, vocab, host_row);
    const SampleRowParams& p = params[r];
    if (masks.begin[r] < 0) {
      out[r] = sample_row(row, p);
      continue;
    }
    check(p.score_token == -1, "sample_rows_masked: row {} is a scoring row", r);
    const AllowedIds allowed{
        std::span<const uint32_t>(masks.words + masks.begin[r], n_words), vocab};
    out[r] = sample_row_result_of(
        sample_allowed(row, p, p.position, p.sample_index, allowed, scratch));
  }
}

}  // namespace kernels
}  // namespace detllm
