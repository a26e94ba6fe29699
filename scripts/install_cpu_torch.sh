#!/usr/bin/env bash
# Install the CPU build of torch 2.13.0 into a virtual environment unless it is there already.
# A local wheel (PIP_FIND_LINKS, e.g. /opt/wheels) wins; otherwise the PyTorch CPU index, so a
# machine without a GPU never downloads the multi-GB CUDA build. Usage: install_cpu_torch.sh VENV TAG
set -euo pipefail
VENV=$1
TAG=${2:-setup}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOCK_TAG=$TAG
# shellcheck source=install_lock.sh
source "$ROOT/scripts/install_lock.sh"
# shellcheck source=venv_install.sh
source "$ROOT/scripts/venv_install.sh"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
if "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  exit 0
fi
wheels=  # the first wheel folder (PIP_FIND_LINKS may name several) that holds the CPU build
read -r -a folders <<< "${PIP_FIND_LINKS:-/opt/wheels}"
for folder in "${folders[@]}"; do
  if ls "$folder"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then wheels=$folder; break; fi
done
if [ -n "$wheels" ]; then
  echo "[$TAG] installing torch 2.13.0 (CPU build) from $wheels"
  venv_install "$VENV" -q --find-links "$wheels" "torch==2.13.0" 2>&1 | quiet_pip
else
  echo "[$TAG] installing torch 2.13.0 (CPU build) from the PyTorch CPU index"
  "${PIP[@]}" install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu 2>&1 | quiet_pip
fi
