#!/usr/bin/env bash
# Create (or reuse) the OpenEnv environment, a virtual environment beside .venv holding OpenEnv's own
# package, openenv-core, pinned by constraints/openenv.txt, and nothing of rlvr: openenv-core needs
# fastmcp 3 (mcp < 2) and gradio, which conflict with verifiers 0.4 (mcp 2.0) and .venv's pins. The
# OpenEnv tests (scripts/test_openenv.sh) run OpenEnv's servers and clients in it, talking to rlvr's
# environment server in .venv over HTTP. Idempotent. Env: RLVR_OPENENV_VENV, PYTHON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RLVR_OPENENV_VENV:-$ROOT/.venv-openenv}
PYTHON=${PYTHON:-python3}
OPENENV_VERSION=0.3.0
cd "$ROOT"
# shellcheck source=install_lock.sh
source "$ROOT/scripts/install_lock.sh"
# shellcheck source=venv_install.sh
source "$ROOT/scripts/venv_install.sh"
LOCK_TAG=setup-openenv
venv_install_start "$VENV"

stamp="$VENV/.rlvr-install-stamp"
want=$(cat constraints/openenv.txt scripts/setup_openenv_env.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$VENV/bin/python" -c "import openenv.core" 2>/dev/null; then
  echo "[setup-openenv] $VENV is up to date"
  exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup-openenv] creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
echo "[setup-openenv] installing openenv-core $OPENENV_VERSION (about a minute the first time)"
venv_install "$VENV" -q -c constraints/openenv.txt "openenv-core==$OPENENV_VERSION" 2>&1 | quiet_pip
venv_warm "$VENV" "import openenv.core, importlib.metadata as m; print(f'[setup-openenv] ok: openenv-core {m.version(\"openenv-core\")}')"
echo "$want" > "$stamp"
