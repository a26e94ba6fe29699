#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install rlvr with pinned CPU dependencies.
# Idempotent: a second run with unchanged pyproject.toml and constraints installs nothing.
# Usage: source-free; scripts/quickstart.sh and scripts/test.sh call it. Env: RLVR_VENV, PYTHON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RLVR_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3}
cd "$ROOT"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

stamp="$VENV/.rlvr-install-stamp"
want=$(cat pyproject.toml constraints/cpu.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import rlvr, torch" 2>/dev/null; then
  echo "[setup] $VENV is up to date"
  exit 0
fi

# torch: the CPU build. A local wheel (PIP_FIND_LINKS, e.g. /opt/wheels) wins; otherwise the
# PyTorch CPU index, so a machine without a GPU never downloads the multi-GB CUDA build.
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  if ls "${PIP_FIND_LINKS:-/opt/wheels}"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    echo "[setup] installing torch 2.13.0 (CPU build) from ${PIP_FIND_LINKS:-/opt/wheels}"
    "${PIP[@]}" install -q --find-links "${PIP_FIND_LINKS:-/opt/wheels}" "torch==2.13.0"
  else
    echo "[setup] installing torch 2.13.0 (CPU build) from the PyTorch CPU index"
    "${PIP[@]}" install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  fi
fi

echo "[setup] installing rlvr (editable) and pinned dependencies from constraints/cpu.txt"
"${PIP[@]}" install -q -c constraints/cpu.txt -e ".[test]" 2>&1 | grep -v -E "^WARNING: Location .* is ignored" || true
"$VENV/bin/python" -c "import rlvr, torch, transformers; print(f'[setup] ok: torch {torch.__version__}, transformers {transformers.__version__}')"
echo "$want" > "$stamp"
