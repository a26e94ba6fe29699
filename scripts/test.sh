#!/usr/bin/env bash
# Set up the environment (idempotent) and run the test suite. Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not slow" or scripts/test.sh tests/envs. Tests run in RLVR_TEST_WORKERS
# processes (pytest-xdist, default one more than the cores: about a third of the tests' time is spent
# waiting — sandbox wall limits, servers starting — and the extra process fills it; each test file kept
# on one worker so its module fixtures are built once, the costliest files first: tests/conftest.py);
# RLVR_TEST_WORKERS=0 runs them in this process.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# (nproc without the OpenMP variables, which it would obey: OMP_NUM_THREADS=1 is usual here)
workers=${RLVR_TEST_WORKERS:-$(( $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) + 1 ))}
if ! [[ $workers =~ ^[0-9]{1,3}$ ]] || (( 10#$workers > 256 )); then
  echo "error: RLVR_TEST_WORKERS must be a whole number of test processes from 0 (run them in this process) to 256, got '$workers'" >&2
  exit 2
fi
"$ROOT/scripts/setup_env.sh"
VENV=${RLVR_VENV:-$ROOT/.venv}
cd "$ROOT"
export RLVR_DATA_DIR=${RLVR_DATA_DIR:-$ROOT/../shared/data}
# One torch thread per process: on 2 cores, two threads are much slower when anything else runs.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
parallel=()
[ "$workers" = 0 ] || parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
echo "[test] running pytest ${parallel[*]} $*"
exec "$VENV/bin/python" -m pytest "${parallel[@]}" "$@"
