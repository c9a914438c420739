#!/usr/bin/env bash
# The FP8 kernels on a GPU machine, in one run: test_cuda's FP8 tests (codec, quantizer, both
# FP8 GEMMs — mma.sync and wgmma — within their bounds, rows = the row alone at every m, the
# negative controls, the KV cache; FP8 models on the backend: CudaFp8Model.* and the conformance
# suite on tiny-qwen3@fp8 / tiny-llama@fp8), then cuda_fp8_bench (Llama-3.1-8B shapes: bf16
# engine and kernel, the FP8 GEMMs and linears, the cuBLASLt FP8 fast path), then
# cuda_e2e_bench --fp8 (8B decode steps at batch 1/8/64 and prefill tokens/s, FP8 vs bf16).
# Each part writes its log as it goes, so a run cut off keeps what finished.
# Usage (GPU machine, repo root, after scripts/gpu/prebuild.sh packed build-gpu-carry/, e.g.
# BINS="cuda_fp8_bench cuda_e2e_bench" scripts/gpu/prebuild.sh):
#   [BIN=build-gpu-carry] [OUT=dir] [TESTS=gtest-filter] [MS=1,8,64,256,2048,4096] [SKIP_TESTS=1] [SKIP_BENCH=1] [SKIP_E2E=1]
#   [E2E_CASES=1x512,8x512,64x512] [PREFILL=2048,4096] [FP8_KV=1] [WG_SPLITS=1,2,3,4,6,8] [E2E_SPLITS=S]
#   [MATRIX=wide@fp8] [E2E_UNFUSED=1] [E2E_CPASYNC=1] [E2E_NOLT=1] [LT=1 [LT_MS=128,512,2048,4096]]
#   scripts/gpu/fp8_gpu.sh
#   (FP8_KV=1: the e2e FP8 runs with --kv-dtype fp8 too; WG_SPLITS: the split-K wgmma GEMM's
#   table, fp8_gemm_wg_split.cuh, at M ≤ 256 for each split count; E2E_SPLITS=S: the e2e FP8
#   runs once more with every FP8 linear on S runs of k — 1: the unsplit wgmma kernel; the
#   first run has each shape's own S, as served models do — → $OUT/fp8_e2e_split.log;
#   E2E_UNFUSED=1: once more, invariant mode only, with the FP8 activation quantizer launched
#   apart instead of fused into RMSNorm / SiLU·mul → $OUT/fp8_e2e_unfused.log;
#   E2E_CPASYNC=1: once more, invariant mode only, the linears of more than 64 rows on the
#   cp.async tiles instead of the TMA-fed kernel (--fp8-prefill-variant 2, same bits)
#   → $OUT/fp8_e2e_cpasync.log;
#   E2E_NOLT=1: once more, invariant mode only, the FP8 linears on the kernel alone instead of
#   their verified cuBLASLt plans (--fp8-lt 0, same bits) → $OUT/fp8_e2e_nolt.log)
#   (LT=1: cuda_fp8_lt_bench, BINS must hold it → $OUT/fp8_lt.log)
#   (MATRIX=M: the guarantee matrix, every mode × V1–V10, on M — wide@fp8, wide@fp8g — with the
#   FP8 KV cache; BINS must hold cuda_guarantee_matrix_bench, → $OUT/fp8_matrix.md)
#   → $OUT/fp8_tests.log, $OUT/fp8_bench.log (its table at the end), $OUT/fp8_bench.err,
#     $OUT/fp8_e2e.log (FP8 vs bf16 tables at the end), $OUT/fp8_e2e.err
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
# The carry (unpacked if only its archive is here) and the libraries it needs.
. "$root/scripts/gpu/carry_env.sh"
cd "$root"

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/fp8_device.txt" 2>&1
echo "device: $(cat "$out/fp8_device.txt"); binaries from $(cat "$bin/COMMIT" 2>/dev/null || echo '?')" >&2

if [ -z "${SKIP_TESTS:-}" ]; then
  DETLLM_REQUIRE_GPU=1 "$bin/test_cuda" --gtest_filter="${TESTS:-CudaFp8*:Gpu/Conformance.*fp8*}" \
    >"$out/fp8_tests.log" 2>&1
  echo "CudaFp8 tests: rc=$? ($(grep -c '^\[       OK' "$out/fp8_tests.log") passed," \
    "$(grep -c '^\[  FAILED  \].*ms)' "$out/fp8_tests.log") failed)" >&2
  grep -E '^\s+\[fp8' "$out/fp8_tests.log" >&2
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  "$bin/cuda_fp8_bench" --ms "${MS:-1,8,64,256,2048,4096}" --wg-splits "${WG_SPLITS:-1,2,3,4,6,8}" \
    >"$out/fp8_bench.log" 2>"$out/fp8_bench.err"
  echo "cuda_fp8_bench: rc=$?" >&2
  sed -n '/^| shape/,$p' "$out/fp8_bench.log"
fi

if [ -z "${SKIP_E2E:-}" ]; then
  "$bin/cuda_e2e_bench" --fp8 ${FP8_KV:+--fp8-kv} --cases "${E2E_CASES:-1x512,8x512,64x512}" \
    --prefill "${PREFILL:-2048,4096}" --steps 10 >"$out/fp8_e2e.log" 2>"$out/fp8_e2e.err"
  echo "cuda_e2e_bench --fp8: rc=$?" >&2
  sed -n '/^FP8 projections/,$p' "$out/fp8_e2e.log"
  if [ -n "${E2E_SPLITS:-}" ]; then  # the same on the split-K wgmma GEMM (an experiment)
    "$bin/cuda_e2e_bench" --fp8 ${FP8_KV:+--fp8-kv} --fp8-wg-splits "$E2E_SPLITS" \
      --cases "${E2E_CASES:-1x512,8x512,64x512}" --prefill "${PREFILL:-2048,4096}" --steps 10 \
      >"$out/fp8_e2e_split.log" 2>"$out/fp8_e2e_split.err"
    echo "cuda_e2e_bench --fp8 --fp8-wg-splits $E2E_SPLITS: rc=$?" >&2
    sed -n '/^FP8 projections/,$p' "$out/fp8_e2e_split.log"
  fi
  if [ -n "${E2E_UNFUSED:-}" ]; then  # the separate quantizer's launches (same bits)
    "$bin/cuda_e2e_bench" --fp8 ${FP8_KV:+--fp8-kv} --fp8-fused 0 --invariant-only \
      --cases "${E2E_CASES:-1x512,8x512,64x512}" --prefill "${PREFILL:-2048,4096}" --steps 10 \
      >"$out/fp8_e2e_unfused.log" 2>"$out/fp8_e2e_unfused.err"
    echo "cuda_e2e_bench --fp8 --fp8-fused 0: rc=$?" >&2
    sed -n '/^FP8 projections/,$p' "$out/fp8_e2e_unfused.log"
  fi
  if [ -n "${E2E_CPASYNC:-}" ]; then  # prefill on the cp.async tiles (same bits)
    "$bin/cuda_e2e_bench" --fp8 ${FP8_KV:+--fp8-kv} --fp8-prefill-variant 2 --invariant-only \
      --cases "${E2E_CASES:-1x512,8x512,64x512}" --prefill "${PREFILL:-2048,4096}" --steps 10 \
      >"$out/fp8_e2e_cpasync.log" 2>"$out/fp8_e2e_cpasync.err"
    echo "cuda_e2e_bench --fp8 --fp8-prefill-variant 2: rc=$?" >&2
    sed -n '/^FP8 projections/,$p' "$out/fp8_e2e_cpasync.log"
  fi
  if [ -n "${E2E_NOLT:-}" ]; then  # the FP8 kernel alone, without the verified plans (same bits)
    "$bin/cuda_e2e_bench" --fp8 ${FP8_KV:+--fp8-kv} --fp8-lt 0 --invariant-only \
      --cases "${E2E_CASES:-1x512,8x512,64x512}" --prefill "${PREFILL:-2048,4096}" --steps 10 \
      >"$out/fp8_e2e_nolt.log" 2>"$out/fp8_e2e_nolt.err"
    echo "cuda_e2e_bench --fp8 --fp8-lt 0: rc=$?" >&2
    sed -n '/^FP8 projections/,$p' "$out/fp8_e2e_nolt.log"
  fi
fi

if [ -n "${LT:-}" ]; then  # which cuBLASLt FP8 executions give the invariant GEMM's bits
  "$bin/cuda_fp8_lt_bench" --ms "${LT_MS:-128,512,2048,4096}" >"$out/fp8_lt.log" 2>"$out/fp8_lt.err"
  echo "cuda_fp8_lt_bench: rc=$?" >&2
  sed -n '/^| shape/,$p' "$out/fp8_lt.log" | tail -20
fi

if [ -n "${MATRIX:-}" ]; then
  "$bin/cuda_guarantee_matrix_bench" --model "$MATRIX" --kv-dtype fp8 --requests 5 \
    >"$out/fp8_matrix.md" 2>"$out/fp8_matrix.err"
  echo "cuda_guarantee_matrix_bench --model $MATRIX --kv-dtype fp8: rc=$?" >&2
  cat "$out/fp8_matrix.md"
fi
