#!/usr/bin/env bash
# The cluster-in-a-box lane: 2 trainer processes (torchrun, FSDP2, gloo), 2 generation servers
# (`rlvr rollout serve --engine hf`), 2 environment servers (`rlvr envs serve code-v1`, sandboxed)
# and asynchronous training, on 127.0.0.1, run clean and with a server of each kind killed mid-run
# (tests/cluster/test_cluster_in_a_box.py, docs/scaling.md). Extra arguments go to pytest.
# RLVR_TEST_CODE_SFT_BASE reuses a program-synthesis warm-up instead of building one (about 1 minute).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup_env.sh"
VENV=${RLVR_VENV:-$ROOT/.venv}
cd "$ROOT"
export RLVR_CLUSTER_LANE=1
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "[test-cluster] running pytest -m cluster tests/cluster $*"
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -m cluster tests/cluster "$@"
