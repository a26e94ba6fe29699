# Sourced by the setup scripts (after install_lock.sh). venv_install VENV ARGS... installs into the virtual
# environment VENV what `pip install ARGS` would, with uv (`uv pip install`) from where pip would look
# (scripts/uv_flags.py), for a fraction of pip's CPU (docs/contributing.md). uv itself goes into VENV first, by
# pip, at the version constraints/cpu.txt pins (the hubs extra uses it too). Where uv cannot be had, or fails,
# pip does the install, saying why; RLVR_INSTALLER=pip uses pip throughout. Needs ROOT (the checkout); LOCK_TAG
# names the script in messages. uv does not compile bytecode (pip compiles every file it installs, most never
# imported): venv_warm VENV CODE runs CODE, the set-up's last check, writing the bytecode of what it imports
# (even under PYTHONDONTWRITEBYTECODE); anything else is compiled on its first import.
venv_installer() {  # the installer RLVR_INSTALLER names: uv (the default) or pip
  case "${RLVR_INSTALLER:-uv}" in
    uv|pip) echo "${RLVR_INSTALLER:-uv}" ;;
    *) echo "error: RLVR_INSTALLER must be uv or pip, got '${RLVR_INSTALLER}'" >&2; return 2 ;;
  esac
}

venv_uv() {  # venv_uv VENV: print the path of VENV's uv, installing it there with pip if it is missing
  local venv=$1 pin
  if [ ! -x "$venv/bin/uv" ]; then
    pin=$(grep -E '^uv==' "$ROOT/constraints/cpu.txt" 2>/dev/null || echo uv)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pin" 2>&1 | quiet_pip >&2
  fi
  [ -x "$venv/bin/uv" ] && echo "$venv/bin/uv"
}

venv_install() {
  local venv=$1 installer uv flags=()
  shift
  installer=$(venv_installer) || return
  if [ "$installer" = uv ]; then
    if ! uv=$(venv_uv "$venv"); then
      echo "[${LOCK_TAG:-setup}] uv could not be installed into $venv: installing with pip" >&2
    elif ! mapfile -t flags < <("$venv/bin/python" "$ROOT/scripts/uv_flags.py"; echo "rc=$?") || [ "${flags[-1]}" != rc=0 ]; then
      echo "[${LOCK_TAG:-setup}] pip's configuration could not be read for uv: installing with pip" >&2
    elif "$uv" pip install --python "$venv/bin/python" "${flags[@]:0:${#flags[@]}-1}" "$@"; then
      return 0
    else
      echo "[${LOCK_TAG:-setup}] uv could not install $*: trying pip (RLVR_INSTALLER=pip uses pip from the start)" >&2
    fi
  fi
  "$venv/bin/python" -m pip install --disable-pip-version-check "$@"
}

venv_warm() {  # venv_warm VENV CODE
  env -u PYTHONDONTWRITEBYTECODE "$1/bin/python" -c "$2"
}
