#!/usr/bin/env bash
# The RL adapters (python/detllm/integrations/) against the frameworks themselves: installs
# TRL and verl (pinned, with torch: several GB) into a separate venv, then runs two GRPO steps
# with each on the default model. Not part of CI (CI runs the adapters' protocol tests,
# tests/python/test_rl_adapters.py, without torch); docs/python.md shows its output.
#
#   scripts/rl_check.sh [install|run|all]   (default: all)
#
# Environment: RL_VENV (default .venv-rl), PY_DETLLM (where the built package is, default
# build-cpu/python-pkg: `ctest --test-dir build-cpu -R python.install` makes it; the venv's
# Python must be the one it was built for), DETLLM_DEFAULT_MODEL (default: models/'s file).
#
# What runs:
#   trl:  examples/trl_grpo.py --trl   TRL's GRPOTrainer, 2 steps, rollout_func = detllm's;
#         then TRL's own VLLMClient (trl.generation.vllm_client) against
#         detllm.integrations.trl_server: /health/, /generate/, /chat/, /get_sequence_logprobs/.
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

run() {
  [ -d "$PY_DETLLM/detllm" ] || { echo "no built detllm package in $PY_DETLLM: run" \
    "ctest --test-dir build-cpu -R python.install (or set PY_DETLLM)" >&2; exit 2; }
  export PYTHONPATH=$PY_DETLLM:$ROOT/python
  local py=$VENV/bin/python
  "$py" -c 'import trl, verl, torch, transformers; print("trl", trl.__version__, "verl", verl.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
  local failed=()
  echo "== TRL: GRPOTrainer with detllm's rollout_func, 2 steps"
  "$py" examples/trl_grpo.py --trl --steps 2 --group 4 --max-tokens 16 || failed+=(trl_grpo)
  echo "== TRL: TRL's VLLMClient against detllm.integrations.trl_server"
  # TRL 1.16's VLLMClient speaks vLLM's OpenAI server (/v1/models, /v1/completions with
  # return_token_ids), not the trl vllm-serve protocol this server answers: docs/python.md.
  "$py" scripts/rl_check_trl_client.py || failed+=(trl_client)
  echo "== verl: DetllmRollout, 2 GRPO steps with verl's advantage and TokenOutput"
  "$py" -c 'from verl.workers.rollout.base import BaseRollout; from detllm.integrations.verl import DetllmRollout; missing = sorted(m for m in BaseRollout.__abstractmethods__ if not hasattr(DetllmRollout, m)); print("verl BaseRollout abstract methods:", sorted(BaseRollout.__abstractmethods__), "missing:", missing); raise SystemExit(1 if missing else 0)' || failed+=(verl_interface)
  "$py" examples/verl_grpo.py --verl --steps 2 --group 4 --max-tokens 16 || failed+=(verl_grpo)
  if [ ${#failed[@]} -gt 0 ]; then echo "rl_check: FAILED: ${failed[*]}"; return 1; fi
  echo "rl_check: all passed"
}

case $what in
  install) install ;;
  run) run ;;
  all) install; run ;;
  *) echo "usage: $0 [install|run|all]" >&2; exit 2 ;;
esac
