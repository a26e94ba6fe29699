# Sourced by the setup scripts (after install_lock.sh). venv_install VENV ARGS... installs into the virtual
# environment VENV what `pip install ARGS` would, with uv (`uv pip install`) from where pip would look
# (scripts/uv_install.py), for a fraction of pip's CPU (docs/contributing.md). uv itself goes into VENV first, by
# pip, at the version constraints/cpu.txt pins (the hubs extra uses it too), and is put there again when it does not
# run. Where uv cannot be had, or fails, pip does the install, saying why; RLVR_INSTALLER=pip uses pip throughout.
# Needs ROOT (the checkout); LOCK_TAG names the script in messages. uv compiles no bytecode (pip compiles every
# file it installs, most never imported; uv does too where PYTHONDONTWRITEBYTECODE is set): venv_warm VENV CODE
# runs CODE, the set-up's last check, writing the bytecode of what it imports; the rest is compiled on first import.

venv_install_start() {  # venv_install_start VENV: refuse a wrong RLVR_INSTALLER at once; forget the last set-up's failure to get uv
  case "${RLVR_INSTALLER:-uv}" in
    uv|UV|pip|PIP) ;;
    *) echo "[${LOCK_TAG:-setup}] error: RLVR_INSTALLER must be uv (the default) or pip, got '${RLVR_INSTALLER}'" >&2; exit 2 ;;
  esac
  rm -f "$1/.rlvr-no-uv"
}

venv_uv() {  # venv_uv VENV: print the path of VENV's uv, (re)installing it there with pip if it does not run
  local venv=$1 pin
  [ ! -e "$venv/.rlvr-no-uv" ] || return 1  # already tried and said in this set-up
  if ! "$venv/bin/uv" --version >/dev/null 2>&1; then
    pin=$(grep -E '^uv==' "$ROOT/constraints/cpu.txt" 2>/dev/null || echo uv)
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$pin" 2>&1 | quiet_pip >&2
    if ! "$venv/bin/uv" --version >/dev/null 2>&1; then
      echo "[${LOCK_TAG:-setup}] uv ($pin) could not be installed into $venv by pip, or does not run there: installing with pip" \
           "(RLVR_INSTALLER=pip skips uv)" >&2
      : > "$venv/.rlvr-no-uv"
      return 1
    fi
  fi
  echo "$venv/bin/uv"
}

venv_install() {
  local venv=$1 uv variables
  shift
  case "${RLVR_INSTALLER:-uv}" in
    uv|UV) if uv=$(venv_uv "$venv"); then
             "$venv/bin/python" "$ROOT/scripts/uv_install.py" "$uv" "$@" && return 0
             variables=$(compgen -e | grep -E '^UV_' | paste -sd, - || true)
             echo "[${LOCK_TAG:-setup}] uv could not install $*: trying pip${variables:+ (uv also read ${variables//,/, }: unset them if they point elsewhere)};" \
                  "RLVR_INSTALLER=pip uses pip from the start" >&2
           fi ;;
  esac
  "$venv/bin/python" -m pip install --disable-pip-version-check "$@"
}

venv_warm() {  # venv_warm VENV CODE
  env -u PYTHONDONTWRITEBYTECODE "$1/bin/python" -c "$2"
}
