// The reduction-order analyzer's checks (docs/contract.md, "What is proved"): for every kernel
// family of the invariant path, the order (describe.h) of a fixed output element is the same in
// every execution context of the bound — batch m, query length, chunk offsets, the other
// sequences of the step, block size and table width (page layout), forced kernels and split
// placements, TP degree; the cuBLASLt plans' verification sweep covers every launch grid of
// every bucket; and the unbounded claims (every context length) are proved with z3 (smt.h).
// `detllm check --proof` prints the report; tests/reduction_order runs it at the CI bound with
// planted schedule dependencies that must be rejected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/reduction_order/describe.h"

namespace detllm::reduction_order {

struct AnalyzerBounds {
  std::string name = "ci";
  // Attention: row positions checked, the batch sizes of decode steps, the query chunk lengths
  // and the longest other sequence sharing a step; every block size and table padding below.
  std::vector<int32_t> positions, decode_batches, chunk_lengths, neighbour_lengths, block_sizes;
  std::vector<int32_t> extra_blocks;
  // GEMM: every m in [1, gemm_max_m].
  int32_t gemm_max_m = 0;
  // TP: every allowed degree up to this.
  int32_t tp_max_degree = 8;
  // The z3 claims (smt.h): off for the planted schedules of the tests, which the enumeration
  // must reject by itself.
  bool smt = true;
};
AnalyzerBounds analyzer_ci_bounds();
AnalyzerBounds analyzer_large_bounds();

// One family's result.
struct FamilyResult {
  std::string family;    // "CUDA GEMM (own kernel)", "tensor-core attention", …
  std::string scope;     // what was enumerated, in words
  int64_t elements = 0;  // output elements whose order was fixed
  int64_t contexts = 0;  // orders described and compared (states)
  double seconds = 0;
  bool ok = true;
  bool skipped = false;        // not run (the z3 claims of a build without z3)
  bool fixed = false;          // no schedule argument: nothing varies, nothing enumerated
  std::string counterexample;  // the first element and the two contexts that differ, and where
};

struct AnalyzerResult {
  std::vector<FamilyResult> families;
  DescribeStats stats;
  bool ok() const;
};

// Runs every family at `bounds` with `schedules` (real_schedules(), or a planted one).
AnalyzerResult run_reduction_order_analyzer(const AnalyzerBounds& bounds,
                                            const Schedules& schedules);
// The report: per family what was proved and within which bounds, or the counterexample; then
// what is assumed and what cannot be analyzed, with the evidence that stands in for a proof.
std::string format_analyzer_result(const AnalyzerBounds& bounds, const AnalyzerResult& r);

// The model configurations whose shapes are analyzed (SmolLM2-135M, Llama-3.1-8B, Qwen3-0.6B-like
// heads): heads, KV heads, head_dim, dim, FFN, vocabulary.
struct AnalyzedModel {
  std::string name;
  ModelConfig config;
};
std::vector<AnalyzedModel> analyzed_models();

}  // namespace detllm::reduction_order
