// The reference sampler: the specification of kernels/sampling/sampler.h written the obvious way
// (full sorts, whole-vocab arrays), beside the other ops' references (ref_ops.cpp). Slow on
// purpose; the fast sampler (sample()) and the CUDA one must return its bits. The reference
// backend (make_ref_ops) samples with it. Tests: tests/kernels/sampler_test.cpp (fast path
// against it), tests/kernels/backend_ops_test.cpp (every backend's sample_rows).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/sampling/sample_row.h"
#include "kernels/sampling/sampler.h"

namespace detllm {

// The token at absolute `position` for sample `sample_index`: sample()'s contract, result and
// errors (invalid params, position or logits throw detllm::Error).
SampleResult sample_reference(std::span<const float> logits, const DrawParams& params,
                              int64_t position, uint32_t sample_index);

// One row of Ops::sample_rows through sample_reference (the reference backend's sample_rows).
SampleRowResult sample_row_reference(std::span<const float> logits, const SampleRowParams& row);

// A masked row (Ops::sample_rows_masked, kernels/sampling/masked_sample.h) the literal way: the
// token drawn from a copy with every id outside `allowed` ((vocab + 31) / 32 words) at -inf,
// then scored under the unmasked logits (a score_token row). kNoneAllowed when the copy is all
// -inf.
SampleRowResult sample_row_masked_reference(std::span<const float> logits,
                                            const SampleRowParams& row,
                                            std::span<const uint32_t> allowed);

}  // namespace detllm
