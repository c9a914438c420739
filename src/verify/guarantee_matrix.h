// The guarantee matrix (design.md section 3): the conformance harness (conformance.h) run
// against every determinism mode (modes.h), one row per variation V1–V11. Each variation is
// DATA — a list of cases, each a workload and two executions that differ only in that
// variation — built by build_variations(); run_matrix() runs every case of every variation
// under every mode, compares the deterministic requests bit for bit (tokens, logprobs, fp32
// logits) and keeps the first mismatch, and GuaranteeMatrix::markdown() prints the table.
// Expected failures are reported, never hidden. Programs: benchmarks/cuda_guarantee_matrix_bench;
// tests: tests/conformance/guarantee_matrix_test.cpp (CPU: invariant and bi-naive hold; a
// batch-dependent backend fails).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "determinism/modes.h"
#include "model/synthetic.h"
#include "verify/conformance.h"

namespace detllm::conformance {

// One comparison: `workload` under execution a and under execution b.
struct VariationCase {
  std::string label;  // e.g. "chunk 7", "3 neighbours"
  std::vector<engine::Request> workload;
  Execution a, b;
  // a runs each request alone, in a fresh engine (the reference: V1, V2, V3, V6, V7, V10).
  bool a_each_alone = false;
  // V4: a generates; b re-scores prompt + generated tokens (teacher forcing); the logits and
  // logprobs of every generated position must be equal.
  bool b_scores_a = false;
  // V8: keep a's and b's cuda_graphs when the mode is applied (the variation is the graphs).
  bool keeps_graph_mode = false;
  // What each run must show it did (conformance.h not_exercised; other_layout in b compares
  // with a's traces). A case whose runs do not show it reads "not exercised", never "holds".
  Expect expect_a, expect_b;
  // V4: the least number of generated positions the scoring run must have compared.
  size_t min_scored_positions = 0;
};

struct Variation {
  std::string id;     // "V1" … "V11"
  std::string title;  // "batch composition"
  std::vector<VariationCase> cases;
  // Why the variation cannot be expressed under a mode ("" = it can), e.g. chunking under a
  // mode that never chunks a prefill.
  std::function<std::string(const ModeInfo&)> not_applicable;
};

struct VariationSpec {
  int32_t vocab_size = 0;
  int32_t n_requests = 7;  // workload size of most cases
  int32_t max_prompt = 40;
  int32_t max_new_tokens = 12;
  bool cpu_threads = false;  // add V11 (CPU thread counts)
  uint64_t seed = 1;
};

// V1–V10 (and V11 when spec.cpu_threads), in order, with the executions of
// tests/conformance/conformance_suite.h expressed as data (fewer cases per variation).
std::vector<Variation> build_variations(const VariationSpec& spec);

struct CellResult {
  // kNotExercised: every comparison was equal, but a case's runs do not show that its
  // variation happened (no preemption, no cache hit…): nothing was proven either way.
  enum class State { kHolds, kFails, kNotExercised, kNotApplicable, kError } state = State::kHolds;
  // first mismatch ("case: request i: what"), why not exercised ("case: why"), why n/a, or
  // the error
  std::string detail;
  int32_t n_cases_run = 0;
  double seconds = 0;
  // "holds" / "FAILS: …" / "not exercised: …" / "n/a: …" / "ERROR: …"
  std::string text() const;
};

// Runs every case of `v` under `mode` (apply_mode on both executions; the target's policy is
// replaced by policy_for_mode) and stops at the first mismatch. A case whose runs did not show
// its variation makes the cell "not exercised" (unless a later case fails).
CellResult run_variation(const Target& target, DeterminismMode mode, const Variation& v);

struct GuaranteeMatrix {
  std::vector<DeterminismMode> modes;          // columns
  std::vector<Variation> variations;           // rows (cases kept for the conditions line)
  std::vector<std::vector<CellResult>> cells;  // [variation][mode]

  // A markdown table V × mode, then a line per failure with its first mismatch. Cells that
  // fail print "FAILS" with the case; the full first mismatch is listed below the table.
  std::string markdown() const;
};

// The target a mode runs on (its ops factory and model); its policy is set by run_matrix.
using TargetForMode = std::function<Target(DeterminismMode)>;
// Runs every (variation, mode); a mode not implemented gives n/a cells. on_cell, when
// given, is called after each cell (progress output).
GuaranteeMatrix run_matrix(
    const TargetForMode& target_for, const std::vector<DeterminismMode>& modes,
    std::vector<Variation> variations,
    const std::function<void(const Variation&, DeterminismMode, const CellResult&)>& on_cell = {});

// The model a matrix or demo runs (benchmarks): a tiny synthetic config by name
// (tiny-llama, tiny-qwen2, tiny-qwen3: host weights), "wide" — llama-3.1-8b's 4096-wide
// layers, n_layers layers, a vocabulary of `wide_vocab`, generated in the backend's memory from
// a recipe (where cuBLAS's split-K changes bits with M) — or a path to a real GGUF / HF model.
struct MatrixModel {
  std::string name;
  std::string conditions;  // one line: shapes, weights source
  ModelConfig config;
  ModelWeights weights;                    // tiny or real models
  std::optional<SyntheticWeights> recipe;  // "wide"
  // A Target on this model (no ops factory, no policy yet). The model must outlive it.
  Target target() const;
};
// "NAME@fp8" / "NAME@fp8g" (any of the above): its projections as FP8 rows, per channel or in
// 128x128 blocks with per-(token, 128-column) activations (model/fp8_weights.h).
// host_weights: "wide" made on the host too (an FP8 KV cache bounds its scales from them).
std::unique_ptr<MatrixModel> make_matrix_model(const std::string& name_or_path,
                                               int32_t wide_layers = 2, int32_t wide_vocab = 4096,
                                               bool host_weights = false);

}  // namespace detllm::conformance
