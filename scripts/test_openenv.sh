#!/usr/bin/env bash
# The OpenEnv lane: set up .venv-openenv (scripts/setup_openenv_env.sh) and run the tests marked
# `openenv` with .venv's Python; they start OpenEnv's servers and clients with .venv-openenv's
# (RLVR_OPENENV_PYTHON). Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup_env.sh"
"$ROOT/scripts/setup_openenv_env.sh"
VENV=${RLVR_VENV:-$ROOT/.venv}
cd "$ROOT"
export RLVR_OPENENV_PYTHON=${RLVR_OPENENV_PYTHON:-${RLVR_OPENENV_VENV:-$ROOT/.venv-openenv}/bin/python}
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "[test-openenv] running pytest -m openenv $*"
exec "$VENV/bin/python" -m pytest -m openenv tests/rlvr/test_hubs_openenv.py "$@"
