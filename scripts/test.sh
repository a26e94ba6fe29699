#!/usr/bin/env bash
# Set up the environment (idempotent) and run the test suite. Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not slow" or scripts/test.sh tests/envs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup_env.sh"
VENV=${RLVR_VENV:-$ROOT/.venv}
cd "$ROOT"
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
# One torch thread per process: on 2 cores, two threads are much slower when anything else runs.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "[test] running pytest $*"
exec "$VENV/bin/python" -m pytest "$@"
