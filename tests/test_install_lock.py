"""`scripts/install_lock.sh`: environments set up at the same time (CI builds them side by side) take
turns at their editable install of rlvr, which writes rlvr.egg-info into the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "scripts" / "install_lock.sh"


def _locked(checkout: Path, command: str, path: str | None = None) -> subprocess.Popen:
    """`with_install_lock bash -c COMMAND` with ROOT=checkout, as a setup script runs it."""
    script = f'ROOT="$1"; source "{LOCK}"; with_install_lock bash -c "$2" "$1"'
    env = os.environ | ({"PATH": path} if path else {})
    return subprocess.Popen(["bash", "-c", script, "install", str(checkout), command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_install_waits_for_the_first_and_says_so(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    first = _locked(tmp_path, 'touch "$0/first.started"; while [ ! -e "$0/release" ]; do sleep 0.05; done; touch "$0/first.done"')
    try:
        _wait_for(tmp_path / "first.started")  # the first holds the lock from here until it is released
        second = _locked(tmp_path, 'if [ -e "$0/first.done" ]; then echo after; else echo beside; fi; exit 3')
        said = second.stderr.readline()  # blocks until the second says that it waits
        assert said == f"[setup] waiting for another environment's install of rlvr in {tmp_path} to finish\n"
    finally:
        (tmp_path / "release").touch()
        assert first.wait(timeout=120) == 0
    out, _ = second.communicate(timeout=120)
    assert out == "after\n" and second.returncode == 3  # ran after the first, and its exit status is kept


def test_an_install_with_the_lock_free_runs_at_once_and_keeps_its_exit_status(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    out, err = (proc := _locked(tmp_path, "echo ran; exit 4")).communicate(timeout=120)
    assert (out, err, proc.returncode) == ("ran\n", "", 4)


def test_without_flock_the_install_just_runs(tmp_path):
    """macOS has no flock(1): the command runs unlocked rather than failing the set-up."""
    (tmp_path / "pyproject.toml").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "touch"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    out, err = (proc := _locked(tmp_path, 'touch "$0/ran"; exit 5', path=str(bin_dir))).communicate(timeout=120)
    assert proc.returncode == 5 and (tmp_path / "ran").exists() and err == "", err


def test_any_exit_status_is_the_commands_own_and_it_runs_once(tmp_path):
    """75 is what `flock -E` is often told to return when the lock is busy: here it is only the command's."""
    (tmp_path / "pyproject.toml").write_text("")
    out, err = (proc := _locked(tmp_path, 'echo x >> "$0/runs"; exit 75')).communicate(timeout=120)
    assert proc.returncode == 75 and (tmp_path / "runs").read_text() == "x\n" and err == "", err


def test_a_checkout_without_pyproject_is_refused_and_nothing_is_created(tmp_path):
    out, err = (proc := _locked(tmp_path, 'touch "$0/ran"')).communicate(timeout=120)
    assert proc.returncode != 0 and "pyproject.toml" in err and not (tmp_path / "ran").exists()
    assert not (tmp_path / "pyproject.toml").exists()
