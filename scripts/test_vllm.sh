#!/usr/bin/env bash
# The vLLM lane: set up .venv-vllm (idempotent, scripts/setup_vllm_env.sh) and run the tests marked
# `vllm` in it. Extra arguments go to pytest. The lane warms up its own SFT base (sft_quickstart as the main
# lane's fixture builds it, cached in runs/vllm-lane) unless RLVR_TEST_SFT_BASE names one.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup_vllm_env.sh"
VENV=${RLVR_VLLM_VENV:-$ROOT/.venv-vllm}
cd "$ROOT"
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
if [ -z "${RLVR_TEST_SFT_BASE:-}" ]; then
  base="$ROOT/runs/vllm-lane/base/final"
  if [ ! -f "$base/config.json" ]; then
    echo "[test-vllm] warming up the SFT base for the lane (sft_quickstart, a few minutes)"
    "$VENV/bin/python" -m rlvr.cli sft sft_quickstart "output_dir=$ROOT/runs/vllm-lane" name=base \
      log.progress=false log.tensorboard=false threads=1 overwrite=true
  fi
  export RLVR_TEST_SFT_BASE=$base
fi
echo "[test-vllm] running pytest -m vllm $*"
exec "$VENV/bin/python" -m pytest -m vllm tests/rlvr/test_vllm.py tests/rlvr/test_engine_contract.py "$@"
