#!/usr/bin/env bash
# Start to first token with and without the persisted GEMM plans (issue 13 item 5;
# docs/cuda.md, "Persisted plans"). Each run is a fresh process: detllm bench on the 8B
# synthetic model (weights generated on the GPU), invariant mode (startup self-check on), one
# request of 16 prompt tokens and 1 output token, no warm-up run:
#   none  --no-gemm-plan-cache      every plan tuned
#   cold  an empty plan file        every plan tuned, the file written
#   warm  the cold run's file       every plan from the file, cuBLASLt ones re-verified
# Prints each wall time (process start to exit, so start to first token plus the exit), the
# "GEMM plans ready" line of each, and warm ÷ none.
# MODEL and BACKEND override the model and backend (e.g. MODEL=synthetic:tiny-llama BACKEND=cpu
# checks the script itself on a CPU machine: no plan file there).
# Usage (GPU machine): scripts/gpu/plan_cache_startup.sh [DETLLM_BINARY]   (default: the
# binary scripts/gpu/prebuild.sh packed, else build-cuda/detllm)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
  if [ -x "$root/build-gpu-carry/detllm" ]; then
    bin=$root/build-gpu-carry/detllm
    export LD_LIBRARY_PATH=$root/build-gpu-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    bin=$root/build-cuda/detllm
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
plans=$tmp/gemm-plans.bin
args=(bench --model "${MODEL:-synthetic:llama-3.1-8b}" --backend "${BACKEND:-cuda}" --mode invariant --workload fixed
      --n 1 --input-len 16 --output-len 1 --no-warmup)
run() {  # name, extra args...
  local name=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  "$bin" "${args[@]}" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" -v n="$name" 'BEGIN {printf "%s %.3f\n", n, b - a}' >>"$tmp/times"
  echo "== $name: $(grep -h 'GEMM plans ready' "$tmp/$name.err" | head -1)"
  grep -h 'warning' "$tmp/$name.err" || true
}
run none --no-gemm-plan-cache
run cold --gemm-plan-cache "$plans"
run warm --gemm-plan-cache "$plans"
echo
echo "| run | start to exit, s |"
echo "|---|---|"
while read -r name s; do printf '| %s | %.2f |\n' "$name" "$s"; done <"$tmp/times"
none=$(awk '$1 == "none" {print $2}' "$tmp/times")
warm=$(awk '$1 == "warm" {print $2}' "$tmp/times")
awk -v w="$warm" -v n="$none" -v b="$(stat -c %s "$plans" 2>/dev/null || echo 0)" \
  'BEGIN {printf "\nwarm / none = %.3f (plan file %s bytes)\n", w / n, b}'
