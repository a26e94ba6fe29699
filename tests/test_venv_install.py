"""`scripts/venv_install.sh` and `scripts/uv_install.py`: the setup scripts install with uv from where pip
would look, with pip where uv cannot be had or fails, and with pip throughout when told to."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("uv_install", ROOT / "scripts" / "uv_install.py")
uv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_install)
parse_config, uv_flags = uv_install.parse_config, uv_install.uv_flags
UV = Path(sys.prefix) / "bin" / "uv"  # the hubs extra installs uv into the test environment


def test_pip_configuration_becomes_uv_flags_an_environment_variable_first():
    listing = "\n".join([
        "global.index-url='https://mirror.example/simple'",
        "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'",
        "global.find-links='/opt/wheels'",
        "install.find-links='/opt/install-wheels'",
        "global.constraint='/etc/pip-constraints.txt'",
        "global.cert='/etc/ssl/certs/ca.crt'",  # no uv flag: uv reads SSL_CERT_FILE
        ":env:.index-url='https://env.example/simple'",
        ":env:.trusted-host='env.example'",
        "not a config line",
    ])
    assert uv_flags(parse_config(listing)) == [
        "--index-url", "https://env.example/simple",
        "--extra-index-url", "file:///opt/a/simple", "--extra-index-url", "file:///opt/b/simple",
        "--find-links", "/opt/install-wheels",
        "--constraint", "/etc/pip-constraints.txt",
        "--allow-insecure-host", "env.example",
        "--index-strategy", "unsafe-best-match",  # pip takes the best version across indexes; so must uv
    ]
    assert uv_flags(parse_config(":env:.no-index='true'\n")) == ["--no-index"]
    assert uv_flags(parse_config("")) == []
    # pip's certificate bundle reaches uv, unless the environment names one already
    config = parse_config(listing)
    assert uv_install.uv_environment(config, {"PATH": "/bin"}) == {"PATH": "/bin", "SSL_CERT_FILE": "/etc/ssl/certs/ca.crt"}
    assert uv_install.uv_environment(config, {"SSL_CERT_FILE": "/mine.pem"}) == {"SSL_CERT_FILE": "/mine.pem"}


def _wheel(folder: Path, name: str = "rlvr_probe_pkg", version: str = "1.0") -> None:
    """A minimal pure-Python wheel of one module, ``name``, whose ``VALUE`` is 42."""
    dist = f"{name}-{version}.dist-info"
    files = {f"{name}.py": b"VALUE = 42\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(data)},{len(data)}\n" for path, data in files.items()) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as whl:
        for path, data in files.items():
            whl.writestr(path, data)
        whl.writestr(f"{dist}/RECORD", record)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    _wheel(folder)
    return folder


def _venv(tmp_path: Path, uv: Path | str | None) -> Path:
    """A real virtual environment (with pip); ``uv``: a uv to put in it (a path to link, or a script's text)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if isinstance(uv, Path):
        (venv / "bin" / "uv").symlink_to(uv)
    elif isinstance(uv, str):
        (venv / "bin" / "uv").write_text(uv)
        (venv / "bin" / "uv").chmod(0o755)
    return venv


def _install(venv: Path, wheels: Path, requirement: str = "rlvr_probe_pkg", times: int = 1, **env: str) -> subprocess.CompletedProcess:
    """`venv_install VENV -q --no-index --find-links WHEELS REQUIREMENT` (``times`` times) as a setup script runs it,
    with no pip configuration of this machine's (its indexes and constraints are not what this checks)."""
    script = f'set -euo pipefail; ROOT="{ROOT}"; LOCK_TAG=setup-test; source "$ROOT/scripts/install_lock.sh"; ' \
             f'source "$ROOT/scripts/venv_install.sh"; venv_install_start "$1"; ' \
             + "; ".join([f'venv_install "$1" -q --no-index --find-links "$2" {requirement}'] * times)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"))}
    return subprocess.run(["bash", "-c", script, "install", str(venv), str(wheels)], capture_output=True, text=True,
                          env=clean | {"PIP_CONFIG_FILE": os.devnull} | env, timeout=300)


def _installed_by(venv: Path) -> str:
    """Who installed the probe package (the INSTALLER file of its metadata), once it imports."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c", "import rlvr_probe_pkg, importlib.metadata as m; "
                          "print(rlvr_probe_pkg.VALUE, m.distribution('rlvr_probe_pkg').read_text('INSTALLER').strip())"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "42"
    return out[1]


@pytest.mark.skipif(not UV.exists(), reason="uv is not installed in this environment (the hubs extra installs it)")
def test_uv_installs_what_pip_would(tmp_path, wheels):
    venv = _venv(tmp_path, UV)
    proc = _install(venv, wheels)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert not list(venv.glob("lib/python*/site-packages/__pycache__/rlvr_probe_pkg.*.pyc"))  # compiled on first import, not before
    assert _installed_by(venv) == "uv"
    # a requirement neither can meet fails the set-up with pip's status, after uv's failure is said
    proc = _install(venv, wheels, "rlvr-probe-pkg==9.9", UV_NO_CACHE="1")
    assert proc.returncode == 1, proc.stderr
    assert "[setup-test] uv could not install -q --no-index --find-links" in proc.stderr
    assert "trying pip (uv also read UV_NO_CACHE: unset them if they point elsewhere); RLVR_INSTALLER=pip uses pip from the start" in proc.stderr
    assert "No matching distribution found for rlvr-probe-pkg==9.9" in proc.stderr


@pytest.mark.skipif(not UV.exists(), reason="uv is not installed in this environment (the hubs extra installs it)")
def test_where_no_process_could_write_bytecode_later_uv_compiles_it_at_install(tmp_path, wheels):
    venv = _venv(tmp_path, UV)
    assert _install(venv, wheels, PYTHONDONTWRITEBYTECODE="1").returncode == 0
    assert list(venv.glob("lib/python*/site-packages/__pycache__/rlvr_probe_pkg.*.pyc"))


def test_a_pip_configuration_that_cannot_be_read_is_said_and_fails_the_install(tmp_path, wheels):
    """(pip itself then refuses it too: the install fails with pip's status, after one line saying why uv did not run)"""
    venv = _venv(tmp_path, UV if UV.exists() else None)
    bad = tmp_path / "pip.conf"
    bad.write_text("[global\nindex-url = x\n")
    proc = _install(venv, wheels, PIP_CONFIG_FILE=str(bad))
    assert proc.returncode != 0
    if UV.exists():
        assert "error: pip's configuration could not be read for uv (`pip config list`: " in proc.stderr
    assert "bad array subscript" not in proc.stderr


@pytest.mark.skipif(not UV.exists(), reason="uv is not installed in this environment (the hubs extra installs it)")
def test_rlvr_installer_pip_installs_with_pip_and_a_wrong_value_is_refused(tmp_path, wheels):
    venv = _venv(tmp_path, UV)
    proc = _install(venv, wheels, RLVR_INSTALLER="pip")
    assert proc.returncode == 0, proc.stderr
    assert _installed_by(venv) == "pip"
    proc = _install(venv, wheels, RLVR_INSTALLER="conda")
    assert proc.returncode == 2 and proc.stderr == "[setup-test] error: RLVR_INSTALLER must be uv (the default) or pip, got 'conda'\n"


def test_a_uv_that_does_not_run_and_cannot_be_put_back_is_said_once_and_pip_installs(tmp_path, wheels):
    """A broken uv in the environment (a killed install can leave one) is installed again by pip; where pip cannot
    (no index here), one line says so and every install of the set-up uses pip without trying again."""
    venv = _venv(tmp_path, "#!/bin/sh\necho 'uv: broken' >&2\nexit 3\n")
    proc = _install(venv, wheels, times=2, PIP_NO_INDEX="1")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("[setup-test]")]
    assert said == [f"[setup-test] uv (uv==0.13.9) could not be installed into {venv} by pip, or does not run there: "
                    "installing with pip (RLVR_INSTALLER=pip skips uv)"], proc.stderr
    assert _installed_by(venv) == "pip"


def test_without_uv_and_no_index_to_get_it_from_pip_installs_and_says_why(tmp_path, wheels):
    venv = _venv(tmp_path, None)
    proc = _install(venv, wheels, PIP_NO_INDEX="1")  # pip cannot fetch uv: no index
    assert proc.returncode == 0, proc.stderr
    assert f"[setup-test] uv (uv==0.13.9) could not be installed into {venv} by pip, or does not run there" in proc.stderr
    assert _installed_by(venv) == "pip"
