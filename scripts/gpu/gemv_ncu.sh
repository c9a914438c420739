#!/usr/bin/env bash
# Nsight Compute on the small-m GEMM's schedules (gemv.cu's warp rings, gemv_stream.cu's
# CTA-wide stream): one launch of each configuration on one shape and m, with the sections that
# say where a streaming kernel waits — SpeedOfLight, MemoryWorkloadAnalysis (DRAM bytes and
# rate), WarpStateStats (stall reasons), SchedulerStats — all into one text file. ncu flushes
# the caches before the launch (its default), so the weights come from DRAM as in a step.
# Why: the warp rings stalled at ~2 TB/s (docs/cuda.md, "Small-m GEMV"); this says on what.
# Usage (GPU machine, repo root, a carry with cuda_gemv_bench):
#   [BIN=build-gpu-carry/cuda_gemv_bench] [OUT=dir] [NCU=ncu] \
#     scripts/gpu/gemv_ncu.sh [CONFIGS (0,4,6,7,8,9,10)] [SHAPE (o)] [M (1)]
#   → $OUT/gemv_ncu.txt, and the duration and DRAM rate of each config on stdout
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/build-gpu-carry/cuda_gemv_bench}
out=${OUT:-$root/gpu-out}
ncu=${NCU:-ncu}
configs=${1:-0,4,6,7,8,9,10}
shape=${2:-o}
m=${3:-1}
[ -x "$bin" ] || { echo "gemv_ncu.sh: no cuda_gemv_bench at $bin (set BIN=)" >&2; exit 1; }
command -v "$ncu" >/dev/null || { echo "gemv_ncu.sh: no ncu (set NCU=)" >&2; exit 1; }
mkdir -p "$out"
report=$out/gemv_ncu.txt
: >"$report"
for c in ${configs//,/ }; do
  echo "[gemv_ncu] config $c, $shape, m = $m" >&2
  {
    echo "=== config $c, shape $shape, m = $m"
    # The config's first launch is its bit check (before any of the other kernels it could be
    # confused with): launch-count 1.
    timeout 120 "$ncu" --kernel-name 'regex:gemv_kernel|gemv_stream_kernel' --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section LaunchStats --section Occupancy \
      "$bin" --configs "$c" --shapes "$shape" --ms "$m" 2>&1 | grep -v '^  *$'
  } >>"$report"
done
# One line a config: its duration and DRAM throughput.
# (ncu prints DRAM Throughput before Duration, so a config's line is printed at the next one.)
awk 'function out() { if (c != "") print "config " c ": duration " d ", DRAM throughput " r "%" }
     /^=== config/ { out(); c = $3; sub(/,$/, "", c); d = "?"; r = "?" }
     /^ *Duration / { d = $NF " " $(NF-1) }
     /^ *DRAM Throughput / { r = $NF }
     END { out() }' "$report"
