# Sourced by the setup scripts. Every editable install of rlvr writes rlvr.egg-info into this
# checkout, so environments set up at the same time (CI builds them side by side) take turns at that
# step: with_install_lock CMD... runs CMD holding a lock on the checkout's pyproject.toml. Without
# flock(1) (macOS) CMD just runs: set the environments up one after another there.
with_install_lock() {
  if command -v flock >/dev/null 2>&1; then
    flock "$ROOT/pyproject.toml" "$@"
  else
    "$@"
  fi
}
