#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp) with clang, ASan and UBSan, and runs each
# for a given number of seconds, seeded with the loader fixtures in tests/data/loaders/.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     e.g. scripts/fuzz.sh 60  |  scripts/fuzz.sh 300 gguf_fuzz
#
# SECONDS defaults to 60; TARGET defaults to every fuzz target (gguf_fuzz, safetensors_fuzz,
# tokenizer_json_fuzz, chat_template_fuzz, http_body_fuzz, model_config_fuzz).
# Build dir: build-fuzz/ (override with BUILD_DIR). With DETLLM_FUZZ=ON the top-level CMake
# compiles the whole library with -fsanitize=fuzzer-no-link (coverage of the parsers, not only
# of the target); here UBSan is also made fatal so that the fuzzer stops on undefined behaviour.
# The corpus grows in build-fuzz/fuzz/corpus/TARGET; a crash leaves its input in
# build-fuzz/fuzz/artifacts/ and makes this script exit non-zero. Reproduce one with
#   build-fuzz/tests/TARGET path/to/crash-file
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf_fuzz safetensors_fuzz tokenizer_json_fuzz chat_template_fuzz http_body_fuzz model_config_fuzz)
build="${BUILD_DIR:-$root/build-fuzz}"
jobs="${JOBS:-2}"

mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDETLLM_FUZZ=ON -DDETLLM_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=undefined" \
  > "$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
ninja -C "$build" -j "$jobs" "${targets[@]}"

data="$root/tests/data/loaders"
work="$build/fuzz"
mkdir -p "$work/artifacts"

# Tokens of the safetensors header, to help the fuzzer write plausible JSON.
cat > "$work/safetensors.dict" <<'DICT'
"\"dtype\""
"\"shape\""
"\"data_offsets\""
"\"__metadata__\""
"\"F32\""
"\"F16\""
"\"BF16\""
"\"I64\""
DICT

status=0
for target in "${targets[@]}"; do
  corpus="$work/corpus/$target"
  mkdir -p "$corpus"
  extra=()
  case "$target" in
    gguf_fuzz) seeds=("$data"/*.gguf) ;;
    safetensors_fuzz)
      seeds=("$data"/*.safetensors "$data"/st_single/*.safetensors "$data"/st_sharded/*.safetensors)
      extra=(-dict="$work/safetensors.dict") ;;
    tokenizer_json_fuzz) seeds=("$root"/tests/data/tokenizer/synthetic_*.json) ;;
    chat_template_fuzz) seeds=("$root"/tests/data/chat/*.jinja) ;;
    http_body_fuzz) seeds=(); extra=(-dict="$root/tests/fuzz/http_body.dict") ;;
    model_config_fuzz)
      seeds=("$data"/hf_v5/*/config.json "$data"/hf_config_defaults.json "$data"/metadata.gguf) ;;
    *) seeds=() ;;
  esac
  # Seeds under names of their own (several are called config.json).
  for seed in "${seeds[@]}"; do cp -f "$seed" "$corpus/seed-$(basename "$(dirname "$seed")")-$(basename "$seed")"; done
  echo "== $target: ${seconds}s, corpus $corpus"
  if ! "$build/tests/$target" "$corpus" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/$target-" \
      "${extra[@]}"; then
    echo "!! $target found a failure: see $work/artifacts/" >&2
    status=1
  fi
done
exit $status
