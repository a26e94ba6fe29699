"""What the test-suite and CI record scripts read from their runs: pytest's summary line, coverage.py's
JSON report and ``.ci/run``'s lane lines (`scripts/record_suite.py`, `scripts/record_ci.py`)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_record_reads_pytests_summary_line():
    counts = _script("record_suite").outcome_counts
    assert counts("2,393 passed, 58 skipped, 68 warnings in 966.02s (0:16:06)") == {"passed": 2393, "skipped": 58, "failed": 0, "errors": 0}
    assert counts("1 failed, 2,392 passed, 1 error in 3.1s") == {"passed": 2392, "skipped": 0, "failed": 1, "errors": 1}
    assert counts("no tests ran in 0.01s")["passed"] == 0  # nothing is recorded then


def test_the_coverage_record_sums_lines_per_package_and_ignores_other_files():
    figures = _script("record_suite").coverage_figures({"files": {
        "rlvr/a.py": {"summary": {"covered_lines": 9, "num_statements": 10}},
        "rlvr/b.py": {"summary": {"covered_lines": 1, "num_statements": 10}},
        "envs/c.py": {"summary": {"covered_lines": 30, "num_statements": 30}},
        "tests/d.py": {"summary": {"covered_lines": 0, "num_statements": 100}},
    }})
    assert figures == pytest.approx({"coverage_rlvr": 50.0, "coverage_envs": 100.0, "coverage_total": 80.0, "statements": 50.0})


def test_the_ci_record_reads_every_lane_that_ci_prints():
    log = ("[ci] lane gpu-check-cpu: 3 min 5 s\nnoise [ci] lane fake: 9 min 9 s\n[ci] lane main: 15 min 30 s\n"
           "[ci] lane vllm: 0 min 59 s\n[ci] all lanes: 24 min\n")
    assert _script("record_ci").lane_minutes(log) == pytest.approx({"gpu_check_cpu_min": 3 + 5 / 60, "main_min": 15.5, "vllm_min": 59 / 60})


def test_the_ci_script_prints_the_lane_lines_the_record_reads():
    """Every lane `.ci/run` times goes through `timed`, or prints the same line itself, in the form
    `lane_minutes` reads."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'echo "[ci] lane $name: $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s"' in ci
    for lane in ("vllm", "gpu-check-cpu"):  # run in the background, each prints its own line into its log
        assert f'echo "[ci] lane {lane}: $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s"' in ci
    timed = set(re.findall(r"^\s*timed ([\w-]+) ", ci, re.M))
    assert {"main", "newest", "openenv", "cluster"} <= timed


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="no /proc/stat here: the record leaves machine_cpu_s out")
def test_the_ci_record_counts_the_cpu_time_of_processes_it_never_waits_for():
    """A process the record does not wait for (a server, the Docker engine) still counts in the machine's figure."""
    import os
    import resource
    import subprocess
    import sys

    machine_cpu_s = _script("record_ci").machine_cpu_s

    def children_cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before, child_before = machine_cpu_s(), children_cpu_s()
    # one busy process per core, so that the machine has no idle time to miscount as busy meanwhile
    children = [subprocess.Popen([sys.executable, "-c", "sum(i * i for i in range(20_000_000))"]) for _ in range(os.cpu_count() or 1)]
    assert [child.wait() for child in children] == [0] * len(children)
    spent = children_cpu_s() - child_before  # about a CPU-second each
    assert spent > 0.3 and machine_cpu_s() - before >= 0.9 * spent  # (the machine's ticks are 1/100 s)


def test_a_gpu_check_phase_past_its_limit_is_stopped_and_says_so(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["gpu_check"]
    run = module.run
    log = tmp_path / "phase.log"
    # the phase starts a child of its own, which must not outlive the phase
    child = "import time; time.sleep(4); print('LATE', flush=True)"
    phase = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); print('started', flush=True); time.sleep(60)"
    code, tail = run([sys.executable, "-c", phase], log, 2, dict(os.environ))
    assert code == 124
    assert "started" in tail and "timed out after 2 s" in tail  # the report names the limit, not an empty failure
    time.sleep(3)
    assert "LATE" not in log.read_text()
