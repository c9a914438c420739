#!/usr/bin/env bash
# Builds the CUDA tests and benchmarks on this (GPU-less) machine, which has nvcc and the
# project's Debian build deps, and packs them with the shared libraries a bare CUDA image lacks
# into build-gpu-carry/ (git-ignored), for scripts/gpu/run_gpu.sh on a GPU machine without
# those deps. Usage: [BUILD_DIR=dir] [CARRY_DIR=dir] [BINS="bench names"] [PACK=file.tar.xz]
# scripts/gpu/prebuild.sh [SOURCE_DIR]
# (default: this checkout, build-gpu/, build-gpu-carry/, every CUDA bench). PACK also writes the
# carry as one xz archive (solid, 64 MiB dictionary: the binaries share most of their code, so
# test_cuda, detllm and four benchmarks, 214 MB with their libraries, pack into 28 MB);
# scripts/gpu/carry_env.sh unpacks it on the GPU machine.
# NCCL, like cuBLAS, is not carried: carry_env.sh finds the toolkit's or PyTorch's.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-$root}
build=${BUILD_DIR:-$root/build-gpu}
carry=${CARRY_DIR:-$root/build-gpu-carry}
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDETLLM_CUDA=ON -DDETLLM_BENCH=ON >/dev/null
bins=${BINS:-"cuda_gemm_bench cuda_attention_bench cuda_e2e_bench cuda_gemm_lt_bench cuda_guarantee_matrix_bench cuda_nondeterminism_bench cuda_step_profile_bench cuda_moe_bench"}
# shellcheck disable=SC2086
ninja -C "$build" -j"${JOBS:-2}" test_cuda detllm $bins
rm -rf "$carry"
mkdir -p "$carry/lib"
# The commit the binaries are built from (the GPU machine's copy of the tree may carry stale git
# metadata): scripts/gpu/bench_modes.sh hands it to detllm bench as DETLLM_GIT_COMMIT.
head=$(git -C "$src" rev-parse --short=12 HEAD)
[ -z "$(git -C "$src" status --porcelain --untracked-files=no)" ] || head=$head-dirty
echo "$head" >"$carry/COMMIT"
cp "$build/tests/test_cuda" "$build/detllm" "$carry/"
for b in $bins; do cp "$build/benchmarks/$b" "$carry/"; done
bins="$bins detllm"
# shellcheck disable=SC2086
(cd "$carry" && strip test_cuda $bins)
# Every shared library they load except the C runtime and CUDA's own (the GPU image has those).
# shellcheck disable=SC2086
(cd "$carry" && ldd test_cuda $bins) | awk '/=> \// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libdl|libpthread|librt|libcublas|libcublasLt|libcudart|libnccl)\.so' |
  xargs -r cp -L -t "$carry/lib"
echo "max GLIBC symbol version needed: $(objdump -T "$carry/test_cuda" "$carry/cuda_gemm_bench" "$carry"/lib/* 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
du -sh "$carry" "$carry"/* "$carry"/lib/*
if [ -n "${PACK:-}" ]; then
  XZ_OPT="-T1 -9e" tar -C "$(dirname "$carry")" -cJf "$PACK" "$(basename "$carry")"
  ls -la "$PACK"
fi
