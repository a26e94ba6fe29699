"""The Docker tests' outer guard (`docker_engine.RootGuard`) leaves no cgroup behind: dockerd makes its containers'
cgroups under it in every v1 hierarchy, and a killed test process leaves its guard to the next one to remove."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from docker_engine import RootGuard

CGROUPS = Path("/sys/fs/cgroup")
HIERARCHIES = [CGROUPS / c for c in ("cpuacct", "memory", "pids") if (CGROUPS / c / "cgroup.procs").exists()]
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or len(HIERARCHIES) < 3, reason="needs root and cgroup v1 cpuacct, memory and pids")
PREFIX = "rlvr-test-guard"  # not the engine's own prefix: a test process running the Docker tests keeps its guard


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_closing_a_guard_removes_it_and_what_was_made_under_it_in_every_hierarchy():
    guard = RootGuard(f"{PREFIX}-{os.getpid()}", 1 << 30, 64)
    assert guard.available
    nested = [h / guard.name / "docker" / "abc" for h in HIERARCHIES]  # as dockerd's --cgroup-parent makes them
    for d in nested:
        d.mkdir(parents=True)
    guard.close()
    assert [h for h in HIERARCHIES if (h / guard.name).exists()] == []


def test_the_guards_of_gone_processes_are_removed_and_a_live_ones_stays():
    dead, alive = f"{PREFIX}-{_dead_pid()}", f"{PREFIX}-{os.getpid()}"
    for h in HIERARCHIES:
        (h / dead / "docker").mkdir(parents=True)
        (h / alive).mkdir()
    try:
        RootGuard.remove_stale(PREFIX)
        assert [h for h in HIERARCHIES if (h / dead).exists()] == []
        assert all((h / alive).is_dir() for h in HIERARCHIES)
    finally:
        for h in HIERARCHIES:
            for d in (h / dead / "docker", h / dead, h / alive):
                if d.is_dir():
                    d.rmdir()
