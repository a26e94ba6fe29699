#!/usr/bin/env bash
# rlvr's GPU acceptance run (562 s on one H200, offline; records/gpu-check-h200.json): the CUDA tests, the real-model
# recipe before/after, GRPO beside TRL in fp32 and bf16, every decoder's tokens/s; one table and
# bench_results/gpu_check/gpu_check.json at the end (scripts/gpu_check.py says what each phase does).
#
#   scripts/gpu_check.sh [--model NAME_OR_PATH] [--phases tests,recipe,grpo,rollout] [--out DIR] [--budget SECONDS] [--record NAME]
#   scripts/gpu_check.sh --cpu        # the same phases, small, on the CPU (CI runs this so the check cannot rot)
#
# Python: $PYTHON, else the project's .venv, else python3 (a GPU image with rlvr installed needs no venv).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
cd "$ROOT"
exec "$PY" scripts/gpu_check.py "$@"
