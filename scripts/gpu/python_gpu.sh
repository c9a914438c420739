#!/usr/bin/env bash
# The Python package on the H200 (issue 15; docs/python.md, "Measured on the H200").
#
#   scripts/gpu/python_gpu.sh pack    # here (no GPU): build detllm._core with the CUDA backend
#                                     # for the device's Python 3.12 and pack it
#   scripts/gpu/python_gpu.sh run     # on the GPU machine, repository root: unpack and run
#   (or, where the tree lacks this script: tar -xJf py-carry.tar.xz &&
#    bash build-py-carry/src/scripts/gpu/python_gpu.sh run)
#
# pack builds build-pycuda/ (-DDETLLM_CUDA=ON -DDETLLM_PYTHON=ON, sm_90a, against
# $PY312 = .venv312/bin/python: a Python 3.12 with nanobind) and writes
#   build-py-xz/py-carry.tar.xz  the extension, the `detllm` CLI of the same build, the
#                                package's sources (python/, tests/python, examples), and
#                                pytest (pure Python) for an image without it;
#   build-py-xz/py-libs.tar.xz   the shared libraries a bare CUDA image lacks (fmt, pcre2,
#                                xxhash, ICU), as scripts/gpu/prebuild.sh picks them; needed
#                                only where build-gpu-carry/lib (prebuild.sh's) is absent.
# Both unpack into build-py-carry/ (git-ignored).
#
# run writes $OUT/<step>.log for every step as it goes (a cut-off run keeps what finished),
# each bounded by `timeout`, and prints each log's tail. No model travels: the steps use
#   - a random Llama with the default model's shapes (SmolLM2-135M: 30 layers, dim 576,
#     vocab 49152), written on the device by python/bench/random_model.py (numpy), for the
#     parity tests, the parity cost and the example loop;
#   - synthetic:llama-3.1-8b, generated in GPU memory by the engine (model/synthetic.h), for the
#     8B weight-update time and generate vs `detllm bench`.
# env: OUT (default py-gpu-out/), PYTHON (default python3), PY_WORK (scratch, default
# /tmp/py-gpu), SKIP="step names" to leave steps out, TOTAL_S (default 300: no step starts
# after that many seconds, and each step's timeout is cut to what is left).
set -uo pipefail
# pack: this checkout; run: the current directory (the GPU machine's repository root, where the
# tarballs were unpacked: this script may run from its copy in build-py-carry/src).
if [ "${1:-}" = run ]; then root=$PWD; else root=$(cd "$(dirname "$0")/../.." && pwd); fi
carry=$root/build-py-carry

pack() {
  set -e
  local py=${PY312:-$root/.venv312/bin/python}
  local build=${BUILD_DIR:-$root/build-pycuda}
  local xzdir=$root/build-py-xz
  "$py" -c 'import sys, nanobind; assert sys.version_info[:2] == (3, 12), sys.version' ||
    { echo "pack: $py must be Python 3.12 with nanobind (python3.12 -m venv .venv312 && .venv312/bin/pip install nanobind)"; exit 1; }
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDETLLM_CUDA=ON \
    -DDETLLM_PYTHON=ON -DDETLLM_TESTS=OFF -DDETLLM_BENCH=OFF -DPython_EXECUTABLE="$py" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
  nice -n 10 ninja -C "$build" -j"${JOBS:-2}" _core detllm_cli
  rm -rf "$carry" && mkdir -p "$carry/ext/detllm" "$carry/src" "$carry/pylib" "$carry/lib"
  cp "$build"/python/detllm/_core*.so "$carry/ext/detllm/"
  cp "$build/detllm" "$carry/detllm"
  strip "$carry"/ext/detllm/_core*.so "$carry/detllm"
  (cd "$root" && git ls-files -co --exclude-standard python tests/python examples scripts/gpu/python_gpu.sh |
     grep -v '__pycache__' | tar -cf - -T - | tar -C "$carry/src" -xf -)
  local head
  head=$(git -C "$root" rev-parse --short=12 HEAD)
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ] || head=$head-dirty
  echo "$head" >"$carry/COMMIT"
  # pytest and its pure-Python dependencies, from any Python that has them
  local site
  site=$(${PYTEST_FROM:-$root/.venv/bin/python} -c 'import pytest, os; print(os.path.dirname(os.path.dirname(pytest.__file__)))')
  for m in pytest _pytest pluggy iniconfig packaging py.py; do
    [ -e "$site/$m" ] && cp -r "$site/$m" "$carry/pylib/"
  done
  find "$carry" -name __pycache__ -prune -exec rm -rf {} +
  (cd "$carry" && ldd ext/detllm/_core*.so detllm) | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux-x86-64|libdl|libpthread|librt|libcublas|libcublasLt|libcudart)\.so' |
    xargs -r cp -L -t "$carry/lib"
  echo "max GLIBC symbol version needed: $(objdump -T "$carry"/ext/detllm/_core*.so "$carry"/lib/* 2>/dev/null |
    grep -o 'GLIBC_[0-9.]*' | sort -V | tail -1)"
  mkdir -p "$xzdir"
  (cd "$root" && tar -cf - --exclude=build-py-carry/lib build-py-carry | xz -T2 -9 >"$xzdir/py-carry.tar.xz")
  (cd "$root" && tar -cf - build-py-carry/lib | xz -T2 -9 >"$xzdir/py-libs.tar.xz")
  du -sh "$carry"/ext/detllm/* "$carry/detllm" "$carry/lib" "$xzdir"/*.xz
}

run() {
  local out=${OUT:-$root/py-gpu-out}
  local py=${PYTHON:-python3}
  local work=${PY_WORK:-/tmp/py-gpu}
  mkdir -p "$out" "$work"
  local t_start
  t_start=$(date +%s)
  for f in py-carry.tar.xz py-libs.tar.xz; do
    for d in "$root" "$root/build-py-xz"; do
      [ -f "$d/$f" ] && { tar -C "$root" -xJf "$d/$f"; break; }
    done
  done
  [ -d "$carry/ext" ] || { echo "python_gpu.sh run: no build-py-carry/ (copy py-carry.tar.xz to the repo root)"; exit 1; }
  local libdir=$carry/lib
  [ -e "$libdir/libicuuc.so.72" ] || libdir=$root/build-gpu-carry/lib
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # cuBLAS 13: the toolkit's, else the one PyTorch's wheels carry (as run_gpu.sh finds it).
  if ! ldd "$carry"/ext/detllm/_core*.so | grep -q 'libcublas.so.13 => /'; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
             "$("$py" -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)"; do
      if [ -n "$d" ] && [ -e "$d/libcublas.so.13" ]; then export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; break; fi
    done
  fi
  local pp=$carry/src/python:$carry/ext
  "$py" -c 'import pytest' 2>/dev/null || pp=$pp:$carry/pylib
  export PYTHONPATH=$pp
  export DETLLM_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
  local cli=$carry/detllm
  [ -x "$cli" ] || cli=$root/build-gpu-carry/detllm
  local src=$carry/src
  local model=$work/smollm2-135m-random
  local skip=" ${SKIP:-} "

  local deadline=$((t_start + ${TOTAL_S:-300}))
  step() {  # step NAME TIMEOUT_S command...: its output in $OUT/NAME.log, its tail printed
    local name=$1 limit=$2
    shift 2
    if [[ $skip == *" $name "* ]]; then echo "== $name: skipped (SKIP)"; return; fi
    local left=$((deadline - $(date +%s)))
    if [ "$left" -lt 15 ]; then echo "== $name: not run (TOTAL_S=${TOTAL_S:-300} s spent)" | tee "$out/$name.log"; return; fi
    [ "$limit" -le "$left" ] || limit=$left
    local t0
    t0=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    echo "rc=$rc wall=$(($(date +%s) - t0))s" >>"$out/$name.log"
    echo "== $name (rc $rc, $(($(date +%s) - t0)) s, limit $limit s)"
    grep -E '^\[measure\]|passed|failed|error|Error|ratio|/ cli|/ plain|median|update [0-9]|engine ready|max \|Δ|step [0-9]|target' "$out/$name.log" | tail -n 30
    [ "$rc" = 0 ] || tail -n 25 "$out/$name.log"
  }

  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    echo "carry commit: $(cat "$carry/COMMIT")"
    echo "libs from: $libdir"
    "$py" -c 'import sys, torch, numpy; print(sys.version); print("torch", torch.__version__, "cuda", torch.cuda.is_available()); print("numpy", numpy.__version__)'
    "$py" -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
    "$py" -c 'import pytest; print("pytest", pytest.__version__, pytest.__file__)'
    "$py" -c 'import detllm, detllm._core as c; print("detllm", c.__version__, c.__file__)'
    "$cli" --version 2>&1 | head -2
  } >"$out/env.log" 2>&1
  cat "$out/env.log"

  step model 60 "$py" "$src/python/bench/random_model.py" "$model" --preset smollm2-135m --seed 0
  export DETLLM_DEFAULT_MODEL=$model
  # 1. trainer-side parity on CUDA: autograd forward = score = rollout (two updates from torch
  #    CUDA tensors), gradients vs torch and transformers; the device-to-device update path
  step parity_tests 180 env DETLLM_TEST_BACKEND=cuda DETLLM_TEST_BACKENDS=cuda DETLLM_TEST_KV_TOKENS=65536 \
    "$py" -m pytest -q -s -rs -p no:cacheprovider "$src/tests/python/test_torch_parity.py" \
    "$src/tests/python/test_cuda_weights.py"
  # 2. the 8B synthetic model's full update from torch CUDA tensors (target <= 1 s)
  step update_8b 150 "$py" "$src/python/bench/update_weights_time.py" --model synthetic:llama-3.1-8b --repeat 3
  # 3. the cost of parity: causal_lm_logprobs fwd + bwd vs plain torch fwd + bwd (target <= 1.3x)
  step parity_cost 120 "$py" "$src/python/bench/parity_cost.py" --backend cuda --batch 8 --len 256 \
    --repeat 3 --kv-cache-tokens 65536
  # 4. the example loop on CUDA: trainer = detllm (max |Δ| = 0), then a plain fp32 torch trainer
  step example_detllm 90 "$py" "$src/examples/rl_grpo.py" --backend cuda --steps 3 --kv-cache-tokens 65536
  step example_torch 90 "$py" "$src/examples/rl_grpo.py" --backend cuda --steps 3 --trainer torch \
    --kv-cache-tokens 65536
  # 5. llm.generate vs `detllm bench`, same requests, 8B synthetic (target >= 0.97x)
  step generate_vs_bench 240 "$py" "$src/python/bench/generate_vs_cli.py" --detllm "$cli" --backend cuda \
    --model synthetic:llama-3.1-8b --n 64 --input-len 128 --output-len 128 --repeat 3
  # 6. the CPU suites of the package, on backend=cuda (rollout = score, updates, sleep/wake, errors)
  step cuda_suites 180 env DETLLM_TEST_BACKEND=cuda DETLLM_TEST_KV_TOKENS=65536 \
    "$py" -m pytest -q -rs -p no:cacheprovider "$src/tests/python/test_llm.py" "$src/tests/python/test_weights.py"
  echo "python_gpu.sh: $(($(date +%s) - t_start)) s in all; logs in $out"
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: scripts/gpu/python_gpu.sh pack|run"; exit 2 ;;
esac
