# Sourced by the setup scripts. Every editable install of rlvr writes rlvr.egg-info into this
# checkout, so environments set up at the same time (CI builds them side by side) take turns at that
# step: with_install_lock CMD... runs CMD holding a lock on the checkout's pyproject.toml, saying so
# when it has to wait. Without flock(1) (macOS) CMD just runs: set environments up one at a time there.
with_install_lock() {
  command -v flock >/dev/null 2>&1 || { "$@"; return; }
  local rc=0
  flock -n -E 75 "$ROOT/pyproject.toml" "$@" || rc=$?
  if [ "$rc" = 75 ]; then
    echo "[setup] waiting for another environment's install of rlvr in $ROOT to finish" >&2
    flock "$ROOT/pyproject.toml" "$@"
  else
    return "$rc"
  fi
}
