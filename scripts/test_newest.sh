#!/usr/bin/env bash
# The newest lane: set up .venv-newest (scripts/setup_newest_env.sh: rlvr without our constraints
# file, every dependency at the newest release the registry serves, torch the CPU build) and run the
# tests marked `smoke` in it: loading, both decoders, the engine contract, one step of each recipe,
# eval, pairs and episodes. It prints the versions it ran first, so a red lane says which release broke.
# Extra arguments go to pytest.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup_newest_env.sh"
VENV=${RLVR_NEWEST_VENV:-$ROOT/.venv-newest}
cd "$ROOT"
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "[test-newest] running pytest -m smoke $*"
exec "$VENV/bin/python" -m pytest -m "smoke and not vllm" tests "$@"
