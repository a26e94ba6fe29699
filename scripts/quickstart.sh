#!/usr/bin/env bash
# The main job on the embedded default, on a fresh machine: set up the environment (idempotent),
# then build a tiny model, warm it up (SFT), evaluate it on the frozen held-out split, train it
# with GRPO, and evaluate again. Writes runs/quickstart/summary.json. On 2 cores: about 5 minutes, plus about
# 1.5 more for the set-up of a new .venv (records/quickstart.json, measured 2026-11-30 on an AVX2 CPU).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
start=$(date +%s)
"$ROOT/scripts/setup_env.sh"
VENV=${RLVR_VENV:-$ROOT/.venv}
cd "$ROOT"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
echo "[quickstart] setup took $(( $(date +%s) - start )) s; running rlvr quickstart $*"
"$VENV/bin/rlvr" quickstart "$@"
echo "[quickstart] done in $(( $(date +%s) - start )) s (including setup)"
