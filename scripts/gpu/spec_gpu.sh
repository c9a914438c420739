#!/usr/bin/env bash
# Speculative decoding on a GPU machine, in one run (docs/speculative.md): test_cuda's
# speculation tests (n-gram drafts change no bit in invariant/bi-naive/verified/padded with
# graphs on and off, verify steps replayed from the decode graphs; windows as decode rows under
# every attention kernel and their negative control; the default model's speculative check),
# then cuda_verify_cost_bench (Llama-3.1-8B shape: a verify step of k = 1…8 from a graph against
# the one-token decode step from a graph, batch 1, 8, 64, context 512) and
# cuda_speculative_bench (the default model, batch 1, n-gram speculation vs plain decoding on
# the CPU benchmark's prompts, graphs on and off). Each part writes its log as it goes, so a run
# cut off keeps what finished.
# Usage (GPU machine, repo root, after the binaries were packed, e.g.
# BINS="cuda_verify_cost_bench cuda_speculative_bench" scripts/gpu/prebuild.sh):
#   [BIN=build-gpu-carry] [OUT=dir] [MODEL=path.gguf] [SKIP_TESTS=1] scripts/gpu/spec_gpu.sh
#   → $OUT/spec_tests.log, $OUT/spec_verify_cost.log, $OUT/spec_e2e.log (+ .err of each bench)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
model=${MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$out"
# The carry (unpacked if only its archive is here) and the libraries it needs.
. "$root/scripts/gpu/carry_env.sh"
cd "$root"

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/spec_device.txt" 2>&1
echo "device: $(cat "$out/spec_device.txt"); binaries from $(cat "$bin/COMMIT" 2>/dev/null || echo '?')" >&2

if [ -z "${SKIP_TESTS:-}" ]; then
  DETLLM_REQUIRE_GPU=1 DETLLM_DEFAULT_MODEL=$model timeout "${TEST_TIMEOUT:-420}" "$bin/test_cuda" \
    --gtest_filter='*CudaSpeculation*:*CudaAttentionTc*BitIdentical*:*CudaAttentionTc*Window*:*BackendOps*attention*:*DefaultModel*Speculative*:CudaGraph*' \
    >"$out/spec_tests.log" 2>&1
  echo "speculation tests: rc=$? ($(grep -c '^\[       OK' "$out/spec_tests.log") passed," \
    "$(grep -c '^\[  FAILED  \].*ms)' "$out/spec_tests.log") failed)" >&2
  grep -E '^  \[' "$out/spec_tests.log" >&2
fi

timeout "${BENCH_TIMEOUT:-300}" "$bin/cuda_verify_cost_bench" --batches 1,8,64 --ks 1,2,3,4,5,6,7,8 \
  --context 512 >"$out/spec_verify_cost.log" 2>"$out/spec_verify_cost.err"
echo "cuda_verify_cost_bench: rc=$?" >&2
cat "$out/spec_verify_cost.log"

timeout "${BENCH_TIMEOUT:-300}" "$bin/cuda_speculative_bench" --model "$model" --max-tokens 128 \
  --repeats 3 >"$out/spec_e2e.log" 2>"$out/spec_e2e.err"
echo "cuda_speculative_bench: rc=$?" >&2
cat "$out/spec_e2e.log"
