#!/usr/bin/env bash
# Quickstart step 1: install everything, build, and generate text with the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "[setup] building (this takes a few minutes on 2 cores)" >&2
scripts/build.sh
echo "[setup] generating with the embedded default model (SmolLM2-135M-Instruct)" >&2
./build/detllm generate --max-tokens 48 "The three primary colors are"
