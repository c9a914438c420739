#!/usr/bin/env bash
# The small-m GEMM's CTA-wide stream (src/kernels/cuda/gemv_stream.cu) on a GPU machine, in one
# call: its bit tests, its kernel times against the warp rings, the tiles and the verified
# cuBLASLt plans, and the batch-1 and batch-8 decode step with it against the default.
# Each step writes its own log under $OUT as it finishes, so a call cut off keeps what ran.
#   1. tests_gemv.log, tests_launch.log  test_cuda: CudaGemv* (every config = the tiles' bits),
#                 CudaLaunch.* (the stream under PDL in whole decode steps, eager and from
#                 graphs = the default's logits)
#   2. gemv.log   cuda_gemv_bench --quick (µs a GEMM, TB/s; exit 1 on any bit mismatch)
#   3. e2e.txt    cuda_e2e_bench --invariant-only, greedy ms a step: the default, then each
#                 stream config without the plans (--gemm-lt 0: every GEMM of <= 16 rows on it,
#                 PDL on as the default chooses for <= 4 rows), interleaved twice; with PLANS=1
#                 also with the plans (--gemv: they keep a bucket where they are faster alone)
# Usage (repo root, a carry from scripts/gpu/prebuild.sh with BINS="cuda_gemv_bench
# cuda_e2e_bench"): [CARRY=build-gpu-carry] [OUT=dir] [CASES=1x512,8x512] [CONFIGS="7 8 9 10 11"]
#   [PLANS=0|1] [SKIP="tests gemv"]
#   scripts/gpu/gemv_stream_check.sh
# Docs: docs/cuda.md, "The CTA-wide small-m stream".
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
carry=${CARRY:-$root/build-gpu-carry}
out=${OUT:-$root/gpu-out}
cases=${CASES:-1x512,8x512}
configs=${CONFIGS:-7 8 9 10 11}
mkdir -p "$out"
for b in test_cuda cuda_gemv_bench cuda_e2e_bench; do
  [ -x "$carry/$b" ] || { echo "gemv_stream_check.sh: no $carry/$b (scripts/gpu/prebuild.sh)" >&2; exit 1; }
done
log() { echo "[gemv_stream_check] $*" | tee -a "$out/steps.log" >&2; }

skip=${SKIP:-}
if [[ " $skip " != *" tests "* ]]; then
  # Apart, each with its own limit: a hang (a ring whose barriers never complete) costs one.
  log "tests: CudaGemv*"
  timeout 200 "$carry/test_cuda" --gtest_filter='CudaGemv*' --gtest_color=no \
    >"$out/tests_gemv.log" 2>&1
  log "CudaGemv rc=$? ($(grep -c '^\[       OK' "$out/tests_gemv.log") passed)"
  log "tests: CudaLaunch.*"
  timeout 300 "$carry/test_cuda" --gtest_filter='CudaLaunch.*' --gtest_color=no \
    >"$out/tests_launch.log" 2>&1
  log "CudaLaunch rc=$? ($(grep -c '^\[       OK' "$out/tests_launch.log") passed)"
fi

if [[ " $skip " != *" gemv "* ]]; then
  log "cuda_gemv_bench --quick"
  timeout 300 stdbuf -oL "$carry/cuda_gemv_bench" --quick >"$out/gemv.log" 2>&1
  log "gemv rc=$?"
fi

e2e() {  # label, then cuda_e2e_bench's extra arguments
  local label=$1
  shift
  timeout 150 "$carry/cuda_e2e_bench" --invariant-only --steps 40 --cases "$cases" "$@" \
    >"$out/e2e_run.log" 2>&1
  local rc=$?
  grep "batch" "$out/e2e_run.log" | sed "s/^/$label: /" >>"$out/e2e.txt"
  [ $rc -eq 0 ] || { log "e2e $label rc=$rc"; tail -5 "$out/e2e_run.log" >>"$out/steps.log"; }
}
for pair in 1 2; do
  e2e "pair $pair default"
  for c in $configs; do
    e2e "pair $pair gemv $c, no plans" --gemv "$c" --gemm-lt 0
    [ "${PLANS:-0}" = 1 ] && e2e "pair $pair gemv $c, plans" --gemv "$c"
  done
done
rm -f "$out/e2e_run.log"
log "e2e done"
cat "$out/e2e.txt" 2>/dev/null
