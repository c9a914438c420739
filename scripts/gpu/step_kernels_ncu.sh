#!/usr/bin/env bash
# The decode step's small kernels (everything but the GEMMs) under Nsight Compute: one metric,
# gpu__time_duration.sum, over cuda_step_profile_bench's steps, summed per kernel into a
# markdown table (scripts/gpu/ncu_kernel_table.py): launches a step, mean / min / max µs, ms a
# step. ncu serializes kernels and (by default) flushes the caches before each, so these are
# upper bounds of a replayed step's kernels and say nothing of the gaps between them; the
# step's own time is cuda_e2e_bench's. Docs: docs/cuda.md, "Between the GEMMs at small batch".
# Usage (GPU machine, repo root, a carry from scripts/gpu/prebuild.sh):
#   [BIN=build-gpu-carry/cuda_step_profile_bench] [OUT=dir] [NCU=ncu] \
#     scripts/gpu/step_kernels_ncu.sh [BATCHES (1,256)] [CONTEXT (512)]
#   → $OUT/ncu_b<batch>.csv and $OUT/kernels_b<batch>.md, the tables also on stdout
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/build-gpu-carry/cuda_step_profile_bench}
out=${OUT:-$root/gpu-out}
ncu=${NCU:-ncu}
batches=${1:-1,256}
context=${2:-512}
# The step's kernels other than the GEMMs (the planner's tuning runs thousands of GEMMs first).
filter='regex:embedding|add_rmsnorm|rmsnorm_kernel|qkv_rope|attention|merge_partials|merge_scan|merge_rows|silu_mul|gather_rows|f32_to_bf16|add_kernel|^(max|hist|plan|collect|finish)_kernel'
[ -x "$bin" ] || { echo "step_kernels_ncu.sh: no cuda_step_profile_bench at $bin (set BIN=)" >&2; exit 1; }
command -v "$ncu" >/dev/null || { echo "step_kernels_ncu.sh: no ncu (set NCU=)" >&2; exit 1; }
mkdir -p "$out"
for b in ${batches//,/ }; do
  echo "[step_kernels_ncu] batch $b, context $context" >&2
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv --kernel-name "$filter" \
    "$bin" --batches "$b" --context "$context" --steps 1 >"$out/ncu_b$b.csv" 2>"$out/ncu_b$b.err"
  { echo "### Batch $b, context $context (ncu, µs a launch)"; echo
    python3 "$root/scripts/gpu/ncu_kernel_table.py" "$out/ncu_b$b.csv"; echo; } | tee "$out/kernels_b$b.md"
done
