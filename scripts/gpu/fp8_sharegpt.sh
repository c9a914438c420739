#!/usr/bin/env bash
# ShareGPT offline throughput of the 8B model, FP8 against bf16 (docs/perf.md "FP8"), in one
# run on one GPU: `detllm bench` on synthetic:llama-3.1-8b with a request file made on any
# machine, every request deterministic, in bf16 (weights generated in GPU memory) and with
# --quantization fp8 (the same recipe's weights made on the host, projections quantized per
# channel), each in the modes invariant and fast; then one table of ratios: FP8 ÷ bf16 per mode
# and invariant ÷ fast per class. Each run writes its JSON, table and log as it goes, so a run
# cut off keeps what finished.
# The request file (any machine, a few seconds):
#   build/detllm bench --model synthetic:llama-3.1-8b --workload sharegpt -n 4096 --max-output 512 \
#     --tokenizer "$DETLLM_TOKENIZER_DATA/llama3/tokenizer.json" \
#     --save-requests build-share/data/sharegpt-llama3-4096-out512.jsonl --save-only
#   gzip -9 build-share/data/sharegpt-llama3-4096-out512.jsonl
# Usage (GPU machine, repo root, after scripts/gpu/prebuild.sh packed the carry):
#   [BIN=build-gpu-carry] [OUT=dir] [REQUESTS=file(.gz)] [N=4096] [MODES=invariant,fast]
#   [CLASSES="bf16 fp8"] [RUN_TIMEOUT=400] scripts/gpu/fp8_sharegpt.sh
#   → $OUT/sharegpt_<class>.{json,md,log}, $OUT/sharegpt_fp8_ratios.md
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-out}
mkdir -p "$out"
. "$root/scripts/gpu/carry_env.sh"
cd "$root"
[ -f "$bin/COMMIT" ] && export DETLLM_GIT_COMMIT=$(cat "$bin/COMMIT")
requests=${REQUESTS:-$(ls build-share/data/sharegpt-*.jsonl* 2>/dev/null | head -1)}
[ -n "$requests" ] || { echo "no request file: set REQUESTS (see the comment at the top)" >&2; exit 2; }
if [[ $requests == *.gz ]]; then
  plain=/tmp/$(basename "${requests%.gz}")
  [ -f "$plain" ] || gunzip -c "$requests" >"$plain"
  requests=$plain
fi
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >"$out/sharegpt_device.txt" 2>&1
echo "device: $(cat "$out/sharegpt_device.txt"); binaries from $(cat "$bin/COMMIT" 2>/dev/null || echo '?')" >&2

for class in ${CLASSES:-bf16 fp8}; do
  extra=()
  [ "$class" = fp8 ] && extra=(--quantization fp8)
  timeout "${RUN_TIMEOUT:-400}" "$bin/detllm" bench --model synthetic:llama-3.1-8b --backend cuda \
    --workload file --requests "$requests" -n "${N:-4096}" --modes "${MODES:-invariant,fast}" \
    --det-share 100 --max-seqs 512 "${extra[@]}" --json "$out/sharegpt_$class.json" \
    >"$out/sharegpt_$class.md" 2>"$out/sharegpt_$class.log"
  echo "sharegpt $class: rc=$?" >&2
  grep -E '^\| (invariant|fast) ' "$out/sharegpt_$class.md" >&2
done

python3 - "$out" <<'EOF' | tee "$out/sharegpt_fp8_ratios.md"
import json, os, sys
out = sys.argv[1]
tps = {}
for cls in ("bf16", "fp8"):
    p = os.path.join(out, f"sharegpt_{cls}.json")
    if not os.path.exists(p):
        continue
    for r in json.load(open(p))["results"]:
        if r["kind"] == "offline":
            tps[(cls, r["mode"])] = r["output_tokens_per_s"]
print("| mode | bf16 out tok/s | FP8 out tok/s | FP8 ÷ bf16 |\n|---|---|---|---|")
for mode in ("invariant", "fast"):
    b, f = tps.get(("bf16", mode)), tps.get(("fp8", mode))
    ratio = f"{f / b:.3f}" if b and f else "–"
    print(f"| {mode} | {b or 0:.0f} | {f or 0:.0f} | {ratio} |")
for cls in ("bf16", "fp8"):
    i, f = tps.get((cls, "invariant")), tps.get((cls, "fast"))
    if i and f:
        print(f"\n{cls}: invariant ÷ fast = {i / f:.3f}")
EOF
