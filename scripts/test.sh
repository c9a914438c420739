#!/usr/bin/env bash
# Quickstart step 2 (and CI): install what is missing, build, run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh
export DETLLM_DEFAULT_MODEL="$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
