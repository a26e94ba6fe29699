# Sourced by the setup scripts. Every editable install of rlvr writes rlvr.egg-info into this
# checkout, so environments set up at the same time (CI builds them side by side) take turns at that
# step: with_install_lock CMD... runs CMD holding a lock on the checkout's pyproject.toml (which must
# exist), saying so on stderr when it has to wait, and returns CMD's exit status. Without flock(1)
# (macOS) CMD just runs: set environments up one at a time there. LOCK_TAG names the script in the message.
with_install_lock() {
  command -v flock >/dev/null 2>&1 || { "$@"; return; }
  (
    exec 9< "$ROOT/pyproject.toml" || exit
    if ! flock -n 9; then
      echo "[${LOCK_TAG:-setup}] waiting for another environment's install of rlvr in $ROOT to finish" >&2
      flock 9 || exit
    fi
    "$@"
  )
}

# pip's output without its "Location ... is ignored" warnings, line by line (a log shows each line as it
# comes); never fails itself, so under `set -o pipefail` a pipeline `pip ... 2>&1 | quiet_pip` fails when pip does
quiet_pip() { grep --line-buffered -v -E "^WARNING: Location .* is ignored" || true; }
