// The reduction-order claims over unbounded parameters (every context length, every K), proved
// with the z3 SMT solver (Debian's libz3-dev; the build links it when found, DETLLM_HAVE_Z3):
// the kernels' grid arithmetic — as written in attention_tc_common.cuh / attention_tc_kernel.cuh
// (n_splits = pos / kTcSplit + 1, a split's tiles from z·kTcSplit in steps of kKvTile, a CTA's
// range to its segment's largest position) and attention_tc_decode_warp.cuh (a warp's run of
// splits) and gemm.cu (k / S per split) — encoded as integer formulas; each claim's negation is
// handed to z3 and must be unsatisfiable. The split and tile sizes come from the schedules
// (describe.h), so a planted grid is analyzed as it is; the enumerated checks (checker.h) tie
// the formulas to the describers on the bounded shapes.
#pragma once

#include <string>
#include <vector>

#include "verify/reduction_order/checker.h"

namespace detllm::reduction_order {

// The claims, one FamilyResult each (skipped without z3).
std::vector<FamilyResult> run_smt_claims(const Schedules& schedules);

// The kernel grid the attention claims are made of. kReal is the code's; the planted ones are
// the negative controls of the encoding (tests/reduction_order: z3 must find a counterexample).
enum class GridVariant : int8_t {
  kReal,
  kSplitsFromChunkStart,  // splits counted from the chunk's first position, not from 0
  kSplitSizeFromBatch,    // 2·split positions while the step has at most 4 sequences
};
// Proves the attention grid claims for split size `split` and tile `tile`: ok, or the
// counterexample z3 found (values of the row's position, the segment's end, …).
struct SmtClaim {
  bool ok = false;
  bool skipped = false;
  std::string counterexample;
};
SmtClaim prove_attention_grid(int split, int tile, GridVariant variant = GridVariant::kReal);
// Whether this build has z3.
bool have_z3();

}  // namespace detllm::reduction_order
