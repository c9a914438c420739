#!/usr/bin/env bash
# Mixture of experts on a GPU machine, in one run: test_cuda's MoE tests (the kernels against
# the reference, the grouped GEMM's rows against the row alone, the negative controls, the
# transformers MoE fixtures, the conformance suite on tiny-qwen3-moe), then cuda_moe_bench
# (OLMoE-1B-7B and Qwen3-30B-A3B shapes, invariant and fast numerics) and the torch peer
# (scripts/gpu/peer_torch_moe.py: torch._grouped_mm, flash SDPA, CUDA graphs), and a table of
# invariant ÷ peer and fast ÷ invariant per row. Each part writes its log as it goes, so a run
# cut off keeps what finished.
# Usage (GPU machine, repo root, after scripts/gpu/prebuild.sh packed build-gpu-carry/):
#   [BIN=build-gpu-carry] [OUT=dir] [MODELS=olmoe-1b-7b,qwen3-30b-a3b] [STEPS=10]
#   [SKIP_TESTS=1] [SKIP_PEER=1] [SKIP_PATHS=1] scripts/gpu/moe_gpu.sh
#   → $OUT/moe_tests.log, moe_conformance.log, moe_bench.log, moe_peer.log, moe_vs_peer.md,
#     moe_bench_grouped_rows_{-1,0}.log (OLMoE: every step one grouped launch / per expert)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
bin=${BIN:-$root/build-gpu-carry}
models=${MODELS:-olmoe-1b-7b,qwen3-30b-a3b}
mkdir -p "$out"
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$root"  # the fixtures' paths are the source tree's

if [ -z "${SKIP_TESTS:-}" ]; then
  DETLLM_REQUIRE_GPU=1 "$bin/test_cuda" --gtest_filter='CudaMoe*' >"$out/moe_tests.log" 2>&1
  echo "CudaMoe tests: rc=$? ($(grep -c '^\[       OK' "$out/moe_tests.log") passed)" >&2
  DETLLM_REQUIRE_GPU=1 "$bin/test_cuda" --gtest_filter='Gpu/Conformance*tiny_qwen3_moe*' \
    >"$out/moe_conformance.log" 2>&1
  echo "conformance on tiny-qwen3-moe: rc=$? ($(grep -c '^\[       OK' "$out/moe_conformance.log") passed)" >&2
fi

"$bin/cuda_moe_bench" --models "$models" --steps "${STEPS:-10}" >"$out/moe_bench.log" \
  2>"$out/moe_bench.err"
echo "cuda_moe_bench: rc=$? ($(grep -c '^RESULT' "$out/moe_bench.log") rows)" >&2

if [ -z "${SKIP_PEER:-}" ]; then
  PYTHONUNBUFFERED=1 python3 "$root/scripts/gpu/peer_torch_moe.py" --models "$models" \
    "$out/moe_peer.json" >"$out/moe_peer.log" 2>&1
  echo "peer: rc=$? ($(grep -c '^RESULT' "$out/moe_peer.log") rows)" >&2
fi

# The invariant grouped GEMMs both ways on the smaller model (the same bits): one launch on
# device offsets at every size, and one invariant GEMM per expert at every size.
if [ -z "${SKIP_PATHS:-}" ]; then
  for r in -1 0; do
    "$bin/cuda_moe_bench" --models olmoe-1b-7b --moe-grouped-rows "$r" --steps "${STEPS:-10}" \
      >"$out/moe_bench_grouped_rows_$r.log" 2>&1
    echo "cuda_moe_bench --moe-grouped-rows $r: rc=$?" >&2
  done
fi

python3 - "$out/moe_bench.log" "$out/moe_peer.log" >"$out/moe_vs_peer.md" <<'PY'
import os, sys
ours, peer = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[:1] == ["RESULT"] and len(f) == 5:
        ours[(f[1], f[2])] = (float(f[3]), float(f[4]))
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        f = line.split()
        if f[:1] == ["RESULT"] and len(f) == 4:
            peer[(f[1], f[2])] = float(f[3])
print("MoE steps, ms (ours: eager; peer: decode replayed from a CUDA graph). Targets: "
      "invariant ÷ peer ≤ 1.0, fast ÷ invariant (time) ≥ 0.95.\n")
print("| model | step | peer | ours invariant | ours fast | invariant ÷ peer | fast ÷ invariant |")
print("|---|---|---:|---:|---:|---:|---:|")
for (m, case), (inv, fast) in ours.items():
    p = peer.get((m, case))
    ps = f"{p:.3f}" if p else "—"
    ratio = f"{inv / p:.2f}" if p else "—"
    print(f"| {m} | {case} | {ps} | {inv:.3f} | {fast:.3f} | {ratio} | {fast / inv:.3f} |")
PY
cat "$out/moe_vs_peer.md"
