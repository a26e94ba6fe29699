#!/usr/bin/env bash
# Create (or refresh) the "newest" environment, a third virtual environment beside .venv: rlvr
# installed as a user without our constraints file gets it, i.e. every dependency at the newest
# release the registry serves. torch is the one exception: the CPU build of 2.13.0 goes in first (a
# newer torch on PyPI is a multi-GB CUDA build) and stays pinned while everything else is upgraded.
# Always upgrades: this lane exists to meet new releases the day they appear.
# Env: RLVR_NEWEST_VENV, PYTHON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RLVR_NEWEST_VENV:-$ROOT/.venv-newest}
PYTHON=${PYTHON:-python3}
cd "$ROOT"
# shellcheck source=install_lock.sh
source "$ROOT/scripts/install_lock.sh"
# shellcheck source=venv_install.sh
source "$ROOT/scripts/venv_install.sh"
LOCK_TAG=setup-newest
venv_install_start "$VENV"  # (torch goes in with uv; rlvr and the rest with pip, as users install)

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-newest] creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"$ROOT/scripts/install_cpu_torch.sh" "$VENV" setup-newest

echo "[setup-newest] installing rlvr (editable) with the newest releases of its dependencies (no constraints file)"
with_install_lock "${PIP[@]}" install -q --upgrade --upgrade-strategy eager -c <(echo "torch==2.13.0") -e ".[test]" 2>&1 | quiet_pip
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
names = ["torch", "transformers", "tokenizers", "accelerate", "datasets", "sympy", "numpy", "trl", "safetensors", "huggingface_hub", "reasoning-gym"]
print("[setup-newest] versions: " + ", ".join(f"{n} {md.version(n)}" for n in names))
PY
