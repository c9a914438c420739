#!/usr/bin/env bash
# The grammar engine for structured output (docs/structured_output.md): xgrammar's C++ core as a
# static library, built from its PyPI source distribution at a pinned version whose sha256 is
# checked, into .deps/ (git-ignored). Idempotent: a second run with the library present does
# nothing. Called by scripts/bootstrap.sh; CMake finds the result (DETLLM_GRAMMAR).
#
#   .deps/xgrammar-<v>.tar.gz        the sdist (pip download; kept, so a rebuild needs no network)
#   .deps/xgrammar-<v>/              include/ (xgrammar, dlpack) + lib/libxgrammar.a + LICENSE
#
# Only the C++ core is built: no Python bindings (the sdist's cmake/config.cmake turns them
# on; a config.cmake in the build folder, read first, turns them off), no tests, no cpptrace,
# no LTO (-fno-lto after the project's -flto=auto), warnings not errors (-Wno-error after its
# -Werror: a newer compiler's new warning must not break our build).
set -euo pipefail
cd "$(dirname "$0")/.."

XG_VERSION=0.2.9
XG_SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
DEPS=$PWD/.deps
PREFIX=$DEPS/xgrammar-$XG_VERSION
SDIST=$DEPS/xgrammar-$XG_VERSION.tar.gz
STAMP=$PREFIX/.detllm-built

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$XG_SHA256" ] && [ -f "$PREFIX/lib/libxgrammar.a" ]; then
  exit 0
fi
mkdir -p "$DEPS"
start=$(date +%s)

sha_ok() { [ -f "$1" ] && echo "$XG_SHA256  $1" | sha256sum -c --status; }

if ! sha_ok "$SDIST"; then
  echo "[deps] downloading xgrammar==$XG_VERSION (source distribution) from PyPI" >&2
  # pip prepares an sdist's metadata even for `pip download`; xgrammar's build backend is
  # scikit-build-core with setuptools-scm and apache-tvm-ffi, so they are installed into a
  # throwaway venv and the download runs without build isolation (no cmake built from source).
  venv=$DEPS/fetch-venv
  rm -rf "$venv" "$DEPS/download"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core==1.1.2 \
    setuptools-scm==10.3.4 apache-tvm-ffi==0.1.15.post2
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation "xgrammar==$XG_VERSION" -d "$DEPS/download"
  mv "$DEPS/download/xgrammar-$XG_VERSION.tar.gz" "$SDIST"
  rm -rf "$venv" "$DEPS/download"
fi
if ! sha_ok "$SDIST"; then
  echo "[deps] error: $SDIST does not have the pinned sha256 $XG_SHA256" \
       "(got $(sha256sum "$SDIST" | cut -d' ' -f1)); remove it and run again" >&2
  exit 1
fi

echo "[deps] building xgrammar $XG_VERSION (C++ core, static) into $PREFIX" >&2
src=$DEPS/src
rm -rf "$src" "$PREFIX"
mkdir -p "$src/build"
tar xzf "$SDIST" -C "$src"
cat > "$src/build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
cmake -S "$src/xgrammar-$XG_VERSION" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-fno-lto -Wno-error" -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
ninja -C "$src/build" -j"$(nproc)" xgrammar >/dev/null
cmake --install "$src/build" >/dev/null
cp "$src/xgrammar-$XG_VERSION/LICENSE" "$PREFIX/LICENSE"
rm -rf "$src"
echo "$XG_SHA256" > "$STAMP"
echo "[deps] xgrammar $XG_VERSION built in $(( $(date +%s) - start )) s" >&2
