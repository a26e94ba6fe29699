#!/usr/bin/env python3
"""Time the main test lane and write its record (``records/test-suite.json``, `rlvr.records`).

Runs the lane as CI does (``scripts/test.sh --ignore=tests/rlvr/test_smoke.py``: one test process more than
the cores, the costliest files first) and records its wall time, the tests passed, skipped and failed, and
the slowest file's seconds, and the CPU-seconds of every process it ran and waited for (``cpu_s``; over the cores,
``cpu_floor_min``: the lane's time were nothing ever waited) and, where ``/proc/stat`` exists, those the whole machine
spent meanwhile (``machine_cpu_s``: also what the lane never waits for, the fork servers' children, servers, the Docker
engine; on a quiet machine that is the lane's work, and the figure to compare since tests fork their runs); it refreshes ``tests/file_costs.json`` (the order the files start in) from
the same run. With ``--coverage`` the lane runs under pytest-cov (slower: time it without) and the
record is ``test-coverage``: line coverage of rlvr/, envs/, tasks/ and sandboxes/, each and together, in
every process the tests start as well as in theirs (`COVERAGE_RC`: spawned and forked ones, torchrun's ranks,
servers, the fork server's children).
The SFT bases are the caller's, as in CI (``RLVR_TEST_SFT_BASE``, ``RLVR_TEST_CODE_SFT_BASE``, ``RLVR_TEST_TOOL_SFT_BASE``): the
lane's time does not include building them.

    python3 scripts/record_suite.py                 # on a quiet machine
    python3 scripts/record_suite.py --name test-suite-avx2   # another kind of CPU (beside records/test-suite.json)
    python3 scripts/record_suite.py --coverage      # pytest-cov and coverage come with the test extra
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PACKAGES = ("rlvr", "envs", "tasks", "sandboxes")
LANE = ["bash", "scripts/test.sh", "-q", "-p", "no:cacheprovider", "--ignore=tests/rlvr/test_smoke.py"]
# coverage.py's settings for --coverage: the processes the tests start are measured too (``patch``: a started
# Python process starts coverage, a forked one keeps it and an os._exit saves its data), each into a file of its own
# beside DATA_FILE (an absolute path: they run in folders of their own), combined at the end by pytest-cov
COVERAGE_RC = """[run]
source = {packages}
parallel = true
patch = subprocess, _exit, fork
data_file = {data_file}
disable_warnings = no-data-collected, module-not-measured, module-not-imported
"""


def outcome_counts(summary: str) -> dict[str, float]:
    """{"passed": n, "skipped": n, "failed": n} from pytest's last line (``2,324 passed, 58 skipped in ...``)."""
    counts = {k: 0.0 for k in ("passed", "skipped", "failed", "errors")}
    for n, what in re.findall(r"(\d[\d,]*) (passed|skipped|failed|errors?)\b", summary):
        counts["errors" if what.startswith("error") else what] = float(n.replace(",", ""))
    return counts


def coverage_figures(report: dict) -> dict[str, float]:
    """Line coverage in percent per package and over all of them, from coverage.py's JSON report."""
    totals = {p: [0, 0] for p in PACKAGES}
    for path, data in report["files"].items():
        package = Path(path).parts[0]
        if package in totals:
            totals[package][0] += data["summary"]["covered_lines"]
            totals[package][1] += data["summary"]["num_statements"]
    figures = {f"coverage_{p}": 100.0 * c / n for p, (c, n) in totals.items() if n}
    covered, statements = (sum(v[i] for v in totals.values()) for i in (0, 1))
    return figures | {"coverage_total": 100.0 * covered / statements, "statements": float(statements)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)  # --cov is not --coverage
    ap.add_argument("--coverage", action="store_true", help="run under pytest-cov and record line coverage (test-coverage)")
    ap.add_argument("--note", default="", help="what else ran on the machine, where it was not quiet")
    ap.add_argument("--name", default="test-suite",
                    help="the record's name: test-suite, or test-suite-KIND on another kind of CPU (records/test-suite-avx2.json)")
    args = ap.parse_args()
    from rlvr.records import commit, kind_name_problem, machine_cpu_s, script_command, write_record

    if problem := kind_name_problem("test-suite", args.name):
        ap.error(problem)
    if args.coverage and args.name != "test-suite":
        ap.error("--name names a timing record; --coverage writes test-coverage")

    at = commit()
    with tempfile.TemporaryDirectory() as tmp:
        costs, cov_json, cpu_json = Path(tmp) / "costs.json", Path(tmp) / "coverage.json", Path(tmp) / "cpu.json"
        rc = Path(tmp) / "coveragerc"
        rc.write_text(COVERAGE_RC.format(packages=", ".join(PACKAGES), data_file=Path(tmp) / ".coverage"))
        cmd = LANE + (["--cov", f"--cov-config={rc}", "--cov-report=", f"--cov-report=json:{cov_json}"] if args.coverage else [])
        t0, before, machine_before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_s()
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "RLVR_TEST_COSTS": str(costs), "RLVR_TEST_CPU": str(cpu_json)}, capture_output=True, text=True)
        wall, after, machine_after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu_s()
        # CPU of every process the lane ran and waited for (test processes, trainers, servers, sandboxed programs)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        summary = (proc.stdout.strip().splitlines() or [""])[-1]
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
        counts = outcome_counts(summary)
        if proc.returncode != 0 or not counts["passed"]:
            print(f"the lane failed ({summary!r}): nothing recorded", file=sys.stderr)
            return 1
        file_costs = json.loads(costs.read_text())
        if cpu_json.is_file():  # where the CPU goes, test by test (the next cut's shortlist)
            per_test = json.loads(cpu_json.read_text())
            (ROOT / "bench_results").mkdir(exist_ok=True)
            (ROOT / "bench_results" / "test_cpu.json").write_text(json.dumps(per_test, indent=1) + "\n")
            print("the costliest tests, CPU-seconds with their processes' (all: bench_results/test_cpu.json):")
            for test, seconds in list(per_test.items())[:25]:
                print(f"{seconds:8.1f}  {test}")
        if args.coverage:
            figures = coverage_figures(json.loads(cov_json.read_text())) | {"passed": counts["passed"]}
            name, command = "test-coverage", "python3 scripts/record_suite.py --coverage"
        else:
            (ROOT / "tests" / "file_costs.json").write_text(json.dumps(file_costs, indent=1) + "\n")
            cores = len(os.sched_getaffinity(0))
            figures = {"main_lane_s": wall, "main_lane_min": wall / 60, **{k: v for k, v in counts.items() if k != "errors"},
                       "slowest_file_s": max(file_costs.values()), "test_seconds_total": sum(file_costs.values()),
                       "cpu_s": cpu, "cpu_percent": 100.0 * cpu / wall, "cpu_floor_min": cpu / cores / 60}
            if machine_before is not None and machine_after is not None:  # (no /proc/stat: left out)
                figures["machine_cpu_s"] = machine_after - machine_before
            name, command = args.name, script_command("record_suite", "test-suite", args.name)
    path = write_record(name, command, figures, note=args.note, at=at)
    print(json.dumps(figures, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
