"""`scripts/test.sh`: how many test processes it starts, and its refusal of a bad RLVR_TEST_WORKERS."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(extra_env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RLVR_TEST_WORKERS"))} | extra_env
    return subprocess.run(["bash", "scripts/test.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_one_test_process_more_than_the_cores_even_with_one_openmp_thread():
    """The default counts the cores this process may use, not OMP_NUM_THREADS (which `nproc` obeys)."""
    proc = _run({"OMP_NUM_THREADS": "1"}, "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_record_scripts.py")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"[test] running pytest -n {len(os.sched_getaffinity(0)) + 1} --dist loadfile" in proc.stdout


def test_a_bad_worker_count_is_one_line_naming_the_variable():
    for bad in ("abc", "-1", "2x", " ", "257", "99999999999999999999"):
        proc = _run({"RLVR_TEST_WORKERS": bad}, "tests/test_record_scripts.py")
        assert proc.returncode == 2 and proc.stderr.startswith("error: RLVR_TEST_WORKERS must be a whole number"), (bad, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "[test] running" not in proc.stdout
