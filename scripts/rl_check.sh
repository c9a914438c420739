#!/usr/bin/env bash
# The RL adapters (python/detllm/integrations/) against the frameworks themselves: installs
# TRL and verl (pinned, with torch: several GB) into a separate venv, then runs two GRPO steps
# with each on the default model. Not part of CI (CI runs the adapters' protocol tests,
# tests/python/test_rl_adapters.py, without torch); docs/python.md shows its output.
#
#   scripts/rl_check.sh [install|run|trl-client|all]   (default: all)
#
# Environment: RL_VENV (default .venv-rl), PY_DETLLM (where the built package is, default
# build-cpu/python-pkg: `ctest --test-dir build-cpu -R python.install` makes it; the venv's
# Python must be the one it was built for), DETLLM_BIN (default build-cpu/detllm),
# DETLLM_DEFAULT_MODEL (default: models/'s file).
#
# What runs:
#   trl:  examples/trl_grpo.py --trl   TRL's GRPOTrainer, 2 steps, rollout_func = detllm's;
#         then (also alone: trl-client) TRL's own VLLMClient (trl.generation.vllm_client)
#         against `detllm serve`: scripts/rl_check_trl_client.py.
#   verl: examples/verl_grpo.py --verl  2 steps, verl's GRPO advantage and TokenOutput; and
#         DetllmRollout has every abstract method of verl's BaseRollout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${RL_VENV:-$ROOT/.venv-rl}
PY_DETLLM=${PY_DETLLM:-$ROOT/build-cpu/python-pkg}
export DETLLM_DEFAULT_MODEL=${DETLLM_DEFAULT_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
# The versions this was last run with (docs/python.md); torch's CPU build is enough.
PINS=(trl==1.16.0 verl==0.9.1 torch==2.15.0 transformers==5.10.4 datasets accelerate gguf numpy requests)
what=${1:-all}

install() {
  [ -x "$VENV/bin/python" ] || python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install --disable-pip-version-check -q "${PINS[@]}"
}

trl_client() {
  echo "== TRL: TRL's VLLMClient against detllm serve"
  "$VENV/bin/python" scripts/rl_check_trl_client.py --bin "${DETLLM_BIN:-$ROOT/build-cpu/detllm}"
}

run() {
  [ -d "$PY_DETLLM/detllm" ] || { echo "no built detllm package in $PY_DETLLM: run" \
    "ctest --test-dir build-cpu -R python.install (or set PY_DETLLM)" >&2; exit 2; }
  export PYTHONPATH=$PY_DETLLM:$ROOT/python
  local py=$VENV/bin/python
  "$py" -c 'import trl, verl, torch, transformers; print("trl", trl.__version__, "verl", verl.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
  local failed=()
  echo "== TRL: GRPOTrainer with detllm's rollout_func, 2 steps"
  "$py" examples/trl_grpo.py --trl --steps 2 --group 4 --max-tokens 16 || failed+=(trl_grpo)
  trl_client || failed+=(trl_client)
  echo "== verl: DetllmRollout, 2 GRPO steps with verl's advantage and TokenOutput"
  "$py" -c 'from verl.workers.rollout.base import BaseRollout; from detllm.integrations.verl import DetllmRollout; missing = sorted(m for m in BaseRollout.__abstractmethods__ if not hasattr(DetllmRollout, m)); print("verl BaseRollout abstract methods:", sorted(BaseRollout.__abstractmethods__), "missing:", missing); raise SystemExit(1 if missing else 0)' || failed+=(verl_interface)
  "$py" examples/verl_grpo.py --verl --steps 2 --group 4 --max-tokens 16 || failed+=(verl_grpo)
  if [ ${#failed[@]} -gt 0 ]; then echo "rl_check: FAILED: ${failed[*]}"; return 1; fi
  echo "rl_check: all passed"
}

case $what in
  install) install ;;
  run) run ;;
  trl-client) trl_client ;;
  all) install; run ;;
  *) echo "usage: $0 [install|run|trl-client|all]" >&2; exit 2 ;;
esac
