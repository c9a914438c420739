#!/usr/bin/env bash
# Runs the CUDA backend's GPU tests and benchmarks on an H200 and writes report.md plus logs to
# $OUT (default gpu-out/). Builds there with -DDETLLM_CUDA=ON (sm_90a) when the project's build
# deps are present; otherwise runs the binaries scripts/gpu/prebuild.sh made (build-gpu-carry/).
# Usage, repo root of the GPU machine: scripts/gpu/run_gpu.sh [gtest filter]  (docs/cuda.md)
#   env: BENCH_ARGS (e.g. --quick, also given to the end-to-end bench), TEST_TIMEOUT (s, default
#        360), BENCH_TIMEOUT (s, default 180), E2E_TIMEOUT (s, default 300),
#        GPU_BUILD=0 (use build-gpu-carry/ even where the deps are present), HF_CHECK=0 (skip the
#        8B transformers checkpoint check), HF_TIMEOUT (s, default 600), HF_WORK (scratch dir)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export DETLLM_REQUIRE_GPU=1  # a GPU test that finds no usable device fails, never skips
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
filter=${1:-*}
t0=$(date +%s)

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  g++ --version | head -1
  ldd --version | head -1
  grep PRETTY /etc/os-release
  echo "cpus: $(nproc)"
  echo "build deps: $(for p in fmt libpcre2-8 libxxhash icu-uc; do pkg-config --exists $p 2>/dev/null && printf '%s ' $p; done) $(ls /usr/include 2>/dev/null | grep -E '^(gtest|nlohmann)$' | tr '\n' ' ')"
} >"$out/env.log" 2>&1

have_deps() {
  for p in fmt libpcre2-8 libxxhash icu-uc; do pkg-config --exists "$p" 2>/dev/null || return 1; done
  [ -f /usr/include/gtest/gtest.h ] && [ -d /usr/include/nlohmann ] && command -v nvcc >/dev/null
}

test_bin="" bench_bin="" attn_bin="" e2e_bin="" cli_bin="" how=""
if [ "${GPU_BUILD:-auto}" != 0 ] && have_deps; then
  build=$root/build-gpu-device
  if cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDETLLM_CUDA=ON \
       -DDETLLM_BENCH=ON >"$out/build.log" 2>&1 &&
     ninja -C "$build" -j"$(nproc)" test_cuda cuda_gemm_bench cuda_attention_bench cuda_e2e_bench detllm_cli >>"$out/build.log" 2>&1; then
    test_bin=$build/tests/test_cuda bench_bin=$build/benchmarks/cuda_gemm_bench attn_bin=$build/benchmarks/cuda_attention_bench
    e2e_bin=$build/benchmarks/cuda_e2e_bench cli_bin=$build/detllm
    how="built on the GPU machine (-DDETLLM_CUDA=ON, sm_90a)"
  fi
else
  echo "build deps (fmt, pcre2, xxhash, icu, gtest, nlohmann-json) missing here" >"$out/build.log"
fi
if [ -z "$test_bin" ] && [ -x "$root/build-gpu-carry/test_cuda" ]; then
  test_bin=$root/build-gpu-carry/test_cuda bench_bin=$root/build-gpu-carry/cuda_gemm_bench
  attn_bin=$root/build-gpu-carry/cuda_attention_bench e2e_bin=$root/build-gpu-carry/cuda_e2e_bench
  cli_bin=$root/build-gpu-carry/detllm
  how="prebuilt by scripts/gpu/prebuild.sh (carried in build-gpu-carry/)"
  export LD_LIBRARY_PATH=$root/build-gpu-carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ -z "$test_bin" ]; then
  echo "run_gpu.sh: no binaries: the build failed (see $out/build.log) and build-gpu-carry/ is absent" | tee "$out/report.md"
  exit 1
fi
# cuBLAS 13: the toolkit's, else the one PyTorch's wheels carry.
if ! ldd "$test_bin" | grep -q 'libcublas.so.13 => /'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           "$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)"; do
    if [ -n "$d" ] && [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
  done
fi
ldd "$test_bin" "$bench_bin" >"$out/ldd.log" 2>&1

timeout "${TEST_TIMEOUT:-360}" "$test_bin" --gtest_filter="$filter" --gtest_color=no 2>&1 | tee "$out/test_cuda.log"
test_rc=${PIPESTATUS[0]}
t1=$(date +%s)
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-180}" "$bench_bin" ${BENCH_ARGS:-} 2>&1 | tee "$out/cuda_gemm_bench.log"
bench_rc=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT:-180}" "$attn_bin" 2>&1 | tee "$out/cuda_attention_bench.log"
attn_rc=${PIPESTATUS[0]}
# shellcheck disable=SC2086
timeout "${E2E_TIMEOUT:-300}" "$e2e_bin" ${BENCH_ARGS:-} 2>&1 | tee "$out/cuda_e2e_bench.log"
e2e_rc=${PIPESTATUS[0]}
# Our attention vs torch SDPA (flash), measured in this run; needs python3 with torch (CUDA).
if python3 -c 'import torch, torch.nn.attention; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  timeout "${BENCH_TIMEOUT:-180}" python3 "$root/scripts/gpu/attention_vs_torch.py" "$attn_bin" 2>&1 |
    tee "$out/attention_vs_torch.log"
  torch_rc=${PIPESTATUS[0]}
else
  echo "skipped: python3 with torch (CUDA) is not available here" | tee "$out/attention_vs_torch.log"
  torch_rc=0
fi
# A Llama-3.1-8B checkpoint written by transformers (save_pretrained, bf16, sharded, its current
# config format), loaded by detllm --backend cuda and scored against transformers' fp32 forward
# (docs/models.md). HF_CHECK=0 skips it (it writes 16 GB to HF_WORK, default /tmp/detllm-hf).
if [ "${HF_CHECK:-1}" != 0 ] &&
   python3 -c 'import torch, transformers; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  timeout "${HF_TIMEOUT:-600}" python3 "$root/scripts/gpu/hf_checkpoint_check.py" "$cli_bin" \
    "${HF_WORK:-/tmp/detllm-hf}" "$out/hf_checkpoint.json" 2>&1 | tee "$out/hf_checkpoint.log"
  hf_rc=${PIPESTATUS[0]}
  rm -rf "${HF_WORK:-/tmp/detllm-hf}"
else
  echo "skipped: HF_CHECK=0, or python3 with torch (CUDA) and transformers is not available" |
    tee "$out/hf_checkpoint.log"
  hf_rc=0
fi
t2=$(date +%s)

{
  echo "# detllm GPU report"
  echo
  echo "Binaries: $how. Tests exit $test_rc ($((t1 - t0)) s incl. build), benchmarks exit $bench_rc, $attn_rc, $e2e_rc and $torch_rc (vs torch), 8B checkpoint check $hf_rc ($((t2 - t1)) s)."
  echo
  echo '## Machine'
  echo '```'
  cat "$out/env.log"
  echo '```'
  echo
  echo '## GPU tests (test_cuda)'
  echo '```'
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|^\[fast path\]|FAILED TEST|tests? ran' "$out/test_cuda.log"
  echo '```'
  echo
  echo '## Invariant GEMM vs default cuBLAS (cuda_gemm_bench)'
  echo
  sed -n '/^Tile variants/,$p' "$out/cuda_gemm_bench.log"
  echo
  echo '## Attention (cuda_attention_bench)'
  echo
  grep -E '^device copy' "$out/cuda_attention_bench.log"
  echo
  sed -n '/^| decode batch/,$p' "$out/cuda_attention_bench.log"
  echo
  echo '## End-to-end decode, Llama-3.1-8B synthetic (cuda_e2e_bench)'
  echo
  grep -E '^device:' "$out/cuda_e2e_bench.log"
  sed -n '/^Llama-3.1-8B decode/,$p' "$out/cuda_e2e_bench.log"
  echo
  echo '## Attention vs torch SDPA (scripts/gpu/attention_vs_torch.py)'
  echo
  cat "$out/attention_vs_torch.log"
  echo
  echo '## Llama-3.1-8B checkpoint written by transformers (scripts/gpu/hf_checkpoint_check.py)'
  echo
  echo '```'
  grep -E '^\[check\]|^score:' "$out/hf_checkpoint.log"
  echo '```'
} >"$out/report.md"
echo "report: $out/report.md"
exit $((test_rc != 0 || bench_rc != 0 || attn_rc != 0 || e2e_rc != 0 || torch_rc != 0 || hf_rc != 0))
