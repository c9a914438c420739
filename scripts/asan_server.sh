#!/usr/bin/env bash
# The server under AddressSanitizer + UndefinedBehaviorSanitizer (docs/server.md, "Sanitizers"):
# builds build-asan/detllm (-DDETLLM_SANITIZE=ON: -fsanitize=address,undefined,
# -fno-sanitize-recover=all) and runs the server's end-to-end suites against it — the hostile
# clients, the API, malformed bodies, disconnects, shutdown, the OpenAI extras and penalties.
# Every sanitizer report goes to $ASAN_DIR (default build-asan/reports); exit 1 if a test
# failed or any report was written. Not CI (the sanitized model is slow): a documented command.
#   scripts/asan_server.sh                  # all the suites above
#   scripts/asan_server.sh test_hostile.py  # one file (names under tests/e2e)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-asan}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDETLLM_SANITIZE=ON \
  -DDETLLM_CUDA=OFF -DDETLLM_TESTS=OFF -DDETLLM_BENCH=OFF >/dev/null
ninja -C "$BUILD" -j"${JOBS:-2}" detllm
ASAN_DIR=${ASAN_DIR:-$BUILD/reports}
rm -rf "$ASAN_DIR" && mkdir -p "$ASAN_DIR"
ASAN_DIR=$(cd "$ASAN_DIR" && pwd)
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(test_hostile.py test_api.py test_malformed.py test_disconnect.py test_shutdown.py
         test_openai_extras.py test_penalties.py)
fi
paths=()
for f in "${files[@]}"; do paths+=("tests/e2e/$f"); done
status=0
# detect_leaks: LeakSanitizer at exit (the server exits 0 after SIGTERM, or the test fails).
DETLLM_BIN="$BUILD/detllm" \
ASAN_OPTIONS="detect_leaks=1:log_path=$ASAN_DIR/asan:abort_on_error=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$ASAN_DIR/ubsan" \
  .venv/bin/python -m pytest "${paths[@]}" -q -rs || status=1
if compgen -G "$ASAN_DIR/*" >/dev/null; then
  echo "sanitizer reports in $ASAN_DIR:"
  ls -l "$ASAN_DIR"
  head -n 40 "$ASAN_DIR"/*
  status=1
else
  echo "no sanitizer report"
fi
exit $status
