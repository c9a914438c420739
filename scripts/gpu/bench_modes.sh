#!/usr/bin/env bash
# The determinism modes side by side on an H200 (issue 6; docs/perf.md): one section per call,
# results (JSON, markdown, logs) under $OUT. Runs the binaries scripts/gpu/prebuild.sh packed
# into build-gpu-carry/ (plus data/sharegpt-*.jsonl.gz, a request file made here with
# `detllm bench --workload sharegpt ... --save-requests F --save-only`, see docs/perf.md).
# Usage, repo root of the GPU machine:
#   scripts/gpu/bench_modes.sh SECTION [extra detllm bench args]
# Sections:
#   tests    the GPU tests (test_cuda; GTEST_FILTER to narrow)
#   matrix   the guarantee matrix, every mode x V1-V10 (4096-wide layers)
#   sweep    offline ShareGPT throughput, every mode x deterministic shares (SHARES, default
#            0,2,10,50,100), N requests (default 512), each run REPEAT times (default 1)
#   online   Poisson arrivals at RATES (default 10,30) req/s, SHARE % deterministic (default 50)
#   groups   verified: verification group size 64..512, ShareGPT, 100% deterministic
#   long     long prompts (4-8k in, 16-64 out): fast, invariant, verified (g=64, 256)
#   small    the real default model (DETLLM_DEFAULT_MODEL), fixed workload, every mode
#   profile  one decode step op by op on the invariant, switched and fast numerics
#            (cuda_step_profile_bench; BATCHES, default 1,64,256)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export DETLLM_REQUIRE_GPU=1  # a GPU test that finds no usable device fails, never skips
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
carry=$root/build-gpu-carry
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -f "$carry/COMMIT" ] && export DETLLM_GIT_COMMIT=$(cat "$carry/COMMIT")  # prebuild.sh's
section=${1:?usage: bench_modes.sh tests|matrix|sweep|online|groups|long|small|profile [args]}
shift
modes=fast,invariant,bi-naive,padded,verified
model=synthetic:llama-3.1-8b
requests() {  # the ShareGPT request file, unpacked once
  local gz
  gz=$(ls "$carry"/data/sharegpt-*.jsonl.gz | head -1)
  local f=/tmp/${gz##*/}
  f=${f%.gz}
  [ -f "$f" ] || gunzip -c "$gz" >"$f"
  echo "$f"
}
bench() {  # name, args...: one detllm bench run, JSON + markdown + log
  local name=$1
  shift
  "$carry/detllm" bench --model "$model" --backend cuda --json "$out/$name.json" "$@" \
    >"$out/$name.md" 2>"$out/$name.log"
  local rc=$?
  echo "== $name: rc $rc"
  cat "$out/$name.md"
  tail -3 "$out/$name.log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >"$out/env.log"
case $section in
  tests)
    "$carry/test_cuda" --gtest_filter="${GTEST_FILTER:-*}" --gtest_color=no 2>&1 |
      tee "$out/test_cuda.log" | grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran"
    ;;
  matrix)
    "$carry/cuda_guarantee_matrix_bench" --model wide --requests 5 "$@" 2>&1 | tee "$out/matrix.md"
    ;;
  sweep)
    bench "sweep-$(echo "${SHARES:-all}" | tr , -)" --workload file --requests "$(requests)" -n "${N:-512}" \
      --modes "${MODES:-$modes}" --det-share "${SHARES:-0,2,10,50,100}" --repeat "${REPEAT:-1}" "$@"
    ;;
  online)
    bench "online" --workload file --requests "$(requests)" -n "${N:-200}" --no-offline \
      --modes "${MODES:-$modes}" --rate "${RATES:-10,30}" --det-share "${SHARE:-50}" "$@"
    ;;
  groups)
    bench "groups" --workload file --requests "$(requests)" -n "${N:-256}" --modes fast,verified \
      --verify-group-tokens 64,128,256,512 --det-share 100 "$@"
    ;;
  long)
    bench "long" --workload long -n "${N:-16}" --modes fast,invariant,verified \
      --verify-group-tokens 64,256 --det-share 100 "$@"
    ;;
  small)
    model=${DETLLM_DEFAULT_MODEL:?set DETLLM_DEFAULT_MODEL to the default model file}
    bench "small" --workload fixed -n "${N:-64}" --input-len 128 --output-len 128 \
      --modes "$modes" --det-share "${SHARES:-0,100}" "$@"
    ;;
  profile)
    "$carry/cuda_step_profile_bench" --batches "${BATCHES:-1,64,256}" "$@" 2>&1 |
      tee "$out/profile.md"
    ;;
  *)
    echo "unknown section '$section'" >&2
    exit 2
    ;;
esac
