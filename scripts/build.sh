#!/usr/bin/env bash
# Configures and builds detllm into build/ (Release). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
# With ccache (scripts/bootstrap.sh installs it) C++ is compiled through a cache inside build/:
# CTest python.install's `pip install .` then reuses the engine's objects (CMakeLists.txt,
# DETLLM_CCACHE_IN_BUILD), and a rebuild after switching commits takes unchanged files from it.
ccache_args=()
command -v ccache >/dev/null && ccache_args=(-DDETLLM_CCACHE_IN_BUILD=ON)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${ccache_args[@]}" "$@" >/dev/null
ninja -C build -j"$(nproc)"
