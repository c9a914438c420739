#!/usr/bin/env bash
# The GPU runs of structured output (docs/structured_output.md, docs/perf.md): the masked
# sampling tests, the constrained conformance tests, and cuda_constrained_bench on synthetic
# Llama-3.1-8B weights with Llama 3's tokenizer. Binaries from scripts/gpu/prebuild.sh
# (BINS="cuda_constrained_bench"). Logs go to $OUT (default gpu-out/), one file a run, each
# written as it runs, so a cut-off call keeps what finished.
# Usage: scripts/gpu/constrained_gpu.sh CARRY_DIR TOKENIZER_JSON [batch sizes, default "64 8"]
set -uo pipefail
carry=$(cd "$1" && pwd)
tokenizer=$2
batches=${3:-64 8}
out=${OUT:-gpu-out}
mkdir -p "$out"
export DETLLM_REQUIRE_GPU=1
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldd "$carry/test_cuda" | grep -q 'libcublas.so.13 => /'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           "$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [ -n "$d" ] && [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
  done
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/env.log" 2>&1
cat "$carry/COMMIT" >>"$out/env.log" 2>/dev/null
timeout "${TEST_TIMEOUT:-240}" "$carry/test_cuda" --gtest_color=no \
  --gtest_filter='*BackendOps*sample_rows*:*BackendOps*score_rows*:CudaSampling.*:*CudaConstrained*:*CudaEngineSampling*' \
  >"$out/test_cuda_masked.log" 2>&1
echo "test_cuda rc=$?" >>"$out/test_cuda_masked.log"
for b in $batches; do
  timeout "${BENCH_TIMEOUT:-200}" "$carry/cuda_constrained_bench" --tokenizer "$tokenizer" \
    --batch "$b" --output-len 128 --rounds 3 >"$out/cuda_constrained_bench_b$b.log" 2>&1
  echo "rc=$?" >>"$out/cuda_constrained_bench_b$b.log"
done
tail -n 3 "$out"/*.log
