"""What the test-suite and CI record scripts read from their runs: pytest's summary line, coverage.py's
JSON report and ``.ci/run``'s lane lines (`scripts/record_suite.py`, `scripts/record_ci.py`)."""

from __future__ import annotations

import importlib.util
import json
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


@pytest.mark.parametrize("script,argv,message", [
    ("record_suite", ["--name", "suite-avx2"], "--name must be test-suite or test-suite-KIND (e.g. test-suite-avx2), got 'suite-avx2'"),
    ("record_suite", ["--name", "test-suite-é"], "--name must be test-suite or test-suite-KIND"),
    ("record_suite", ["--name", "test-suite-avx2", "--coverage"], "--name names a timing record; --coverage writes test-coverage"),
    ("record_suite", ["--nam", "test-suite-avx2"], "unrecognized arguments: --nam"),
    ("record_ci", ["--name", "ci.avx2"], "--name must be ci or ci-KIND (e.g. ci-avx2), got 'ci.avx2'"),
    ("record_quickstart", ["--name", "quickstart-é"], "--name must be quickstart or quickstart-KIND"),
])
def test_a_records_name_is_refused_before_anything_is_measured(script, argv, message):
    """A record of another kind of CPU goes beside its script's own record (`rlvr.records.kind_name_problem`),
    never over it or elsewhere; a refused name costs nothing (no lane, clone or quickstart started)."""
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / f"{script}.py"), *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == "", (proc.stdout, proc.stderr)


def test_a_record_names_the_command_that_remakes_it():
    from rlvr.records import script_command

    assert script_command("record_suite", "test-suite", "test-suite") == "python3 scripts/record_suite.py"
    assert script_command("record_ci", "ci", "ci-avx2") == "python3 scripts/record_ci.py --name ci-avx2"


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

    from rlvr.records import machine_cpu_s

    assert _script("record_ci").machine_cpu_s is machine_cpu_s  # (record_suite.py uses it too)

    def children_cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    before, child_before = machine_cpu_s(), children_cpu_s()
    # one busy process per core, so that the machine has no idle time to miscount as busy meanwhile
    children = [subprocess.Popen([sys.executable, "-c", "sum(i * i for i in range(20_000_000))"]) for _ in range(os.cpu_count() or 1)]
    assert [child.wait() for child in children] == [0] * len(children)
    spent = children_cpu_s() - child_before  # about a CPU-second each
    assert spent > 0.3 and machine_cpu_s() - before >= 0.9 * spent  # (the machine's ticks are 1/100 s)


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["gpu_check"]
    return module


def test_a_gpu_check_phase_past_its_limit_is_stopped_and_says_so(tmp_path):
    run = _gpu_check().run
    log = tmp_path / "phase.log"
    # the phase starts a child of its own, which must not outlive the phase
    child = "import time; time.sleep(4); print('LATE', flush=True)"
    phase = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); print('started', flush=True); time.sleep(60)"
    code, tail = run([sys.executable, "-c", phase], log, 2, dict(os.environ))
    assert code == 124
    assert "started" in tail and "timed out after 2 s" in tail  # the report names the limit, not an empty failure
    time.sleep(3)
    assert "LATE" not in log.read_text()


def test_a_gpu_check_phase_stays_in_the_callers_session_so_a_niced_check_yields_the_cpu(tmp_path):
    """CI runs the check at `nice -n 19` beside its lanes. With the kernel's autogroups a process in a session of its own
    is scheduled as a peer of the caller's whole session, whatever its nice value: a phase must keep the caller's session
    (its own process group is enough to stop it whole)."""
    log = tmp_path / "phase.log"
    code, _ = _gpu_check().run([sys.executable, "-c", "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"], log, 60,
                               dict(os.environ))
    assert code == 0
    pid, group, session = (int(x) for x in log.read_text().split())
    assert group == pid and group != os.getpgid(0)
    assert session == os.getsid(0)


def test_a_gpu_checks_report_becomes_a_record_the_pages_can_cite(tmp_path):
    from rlvr.records import Record, command_problems

    gpu_check = _gpu_check()
    report = {"seconds": 562.0, "machine": {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "cuda": "13.0", "cpus": 16, "python": "3.12.3"},
              "phases": {"tests": {"ok": False, "seconds": 199.0, "numbers": {"passed": 44, "failed": 6, "skipped": 13}},
                         "recipe": {"ok": True, "seconds": 86.0, "numbers": {"gain": 0.25, "gain_ci95": [0.18, 0.32], "decoder": "cuda_graph",
                                                                             "eval-before_s": 18.0}},
                         "grpo": {"ok": True, "seconds": 146.0, "numbers": {"bf16": {"ratio": 1.35, "rlvr_gpu_mb": None}}},
                         "rollout": {"ok": False, "seconds": 0.0, "numbers": {}}}}  # not run: no figures
    figures = gpu_check.figures_of(report)
    assert figures == {"seconds": 562.0, "tests_ok": 0, "tests_seconds": 199.0, "tests_passed": 44, "tests_failed": 6, "tests_skipped": 13,
                       "recipe_ok": 1, "recipe_seconds": 86.0, "recipe_gain": 0.25, "recipe_gain_ci95_0": 0.18, "recipe_gain_ci95_1": 0.32,
                       "recipe_eval_before_s": 18.0, "grpo_ok": 1, "grpo_seconds": 146.0, "grpo_bf16_ratio": 1.35}
    command = gpu_check.recorded_command(["--budget", "570", "--out", "/tmp/gc", "--out=/x", "--record", "gpu-check-h200"])
    assert command == "scripts/gpu_check.sh --budget 570 --record gpu-check-h200"  # no path of the measuring machine
    record = Record.load(gpu_check.write_gpu_record("gpu-check-h200", report, command, folder=tmp_path))
    assert record.machine["gpu"] == "NVIDIA H200" and record.machine["cpus"] == 16 and record.machine["torch"] == "2.11.0+cu130"
    assert record.figures["recipe_gain"] == 0.25 and not command_problems(record)


def test_a_gpu_check_with_its_budget_spent_starts_no_phase_and_still_writes_its_table(tmp_path):
    import subprocess

    out, record = tmp_path / "out", ROOT / "records" / "test-budget-spent.json"
    try:
        r = subprocess.run([sys.executable, "scripts/gpu_check.py", "--cpu", "--model", str(tmp_path), "--phases", "rollout,tests",
                            "--budget", "30", "--out", str(out), "--record", record.stem], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert not record.exists()  # a record replaces the figures pages cite: only a whole run writes one
    finally:
        record.unlink(missing_ok=True)
    assert r.returncode == 1, r.stderr  # phases not run are failures, not passes
    assert "| rollout | FAILED | 0 | not run: " in r.stdout and "of the --budget of 30 s left" in r.stdout
    assert f"records/{record.stem}.json not written: phase(s) tests, recipe, grpo, rollout did not run" in r.stdout, r.stdout
    report = json.loads((out / "gpu_check.json").read_text())
    assert set(report["phases"]) == {"rollout", "tests"} and not (out / "rollout.log").exists()
    abbreviated = subprocess.run([sys.executable, "scripts/gpu_check.py", "--cpu", "--ou", str(out)], cwd=ROOT, capture_output=True, text=True,
                                 timeout=120)
    assert abbreviated.returncode == 2  # no abbreviations: a record's command must be able to drop --out
    bad = subprocess.run([sys.executable, "scripts/gpu_check.py", "--cpu", "--record", "../x"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--record '../x'" in bad.stderr


@pytest.mark.parametrize("config,overrides,variable", [("sft_code_quickstart", "CODE_SFT_BASE_OVERRIDES", "RLVR_TEST_CODE_SFT_BASE"),
                                                       ("sft_tool_products", "TOOL_SFT_BASE_OVERRIDES", "RLVR_TEST_TOOL_SFT_BASE")])
def test_ci_builds_each_warm_up_as_the_tests_fixture_would(config, overrides, variable):
    """.ci/run builds the warm-ups the lanes reuse with the overrides of the fixtures that would build them
    (tests/conftest.py), and hands the lanes the folder it built: a base built otherwise would be another model under the
    same name. The whole command is read (environment, arguments, redirection), and the variable's export."""
    import shlex

    conftest = importlib.util.spec_from_file_location("ci_conftest", ROOT / "tests" / "conftest.py")
    module = importlib.util.module_from_spec(conftest)
    conftest.loader.exec_module(module)
    script = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    lines = [line for line in script.splitlines() if f" sft {config} " in line]
    assert len(lines) == 1, f".ci/run should build {config} once: {lines}"
    command = lines[0].split("rc=0;")[-1].split("||")[0]
    words = shlex.split(command)
    redirect = words.index(">")
    assert words[redirect + 2:] == ["2>&1"] and words[redirect + 1].startswith("$PWD/runs/"), words[redirect:]  # nothing after it
    assert words[:5] == ["OMP_NUM_THREADS=1", "HF_HUB_OFFLINE=1", ".venv/bin/python", "-m", "rlvr.cli"] and words[5:7] == ["sft", config]
    arguments = words[7:redirect]
    folder = next(w.split("=", 1)[1] for w in arguments if w.startswith("output_dir="))
    assert "name=base" in arguments and "overwrite=true" in arguments
    built = [w for w in arguments if not w.startswith("output_dir=") and w not in ("name=base", "overwrite=true")]
    assert sorted(built) == sorted(getattr(module, overrides)), (built, getattr(module, overrides))
    assert any(line.strip() == f"export {variable}={folder}/base/final" for line in script.splitlines()), f"{variable} must name {folder}/base/final"


def test_the_per_test_cpu_table_counts_each_tests_own_cpu_and_its_childrens(tmp_path):
    """RLVR_TEST_CPU (tests/conftest.py): under xdist, as the lanes run, a test that waits for a child burning the CPU is
    charged the child's seconds; one doing nothing is charged almost none (CPU-seconds, which load does not inflate)."""
    import subprocess
    import textwrap

    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.conftest import pytest_runtest_logreport, pytest_runtest_makereport, pytest_runtest_protocol, pytest_sessionfinish
    """))
    (tmp_path / "test_burn.py").write_text(textwrap.dedent("""
        import subprocess, sys
        def test_child():
            subprocess.run([sys.executable, "-c", "sum(i * i for i in range(4_000_000))"], check=True)
        def test_nothing():
            pass
    """))
    table = tmp_path / "cpu.json"
    outside_pytest = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # (a worker's PYTEST_XDIST_WORKER: not the controller)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_burn.py")], cwd=tmp_path, env={**outside_pytest, "RLVR_TEST_CPU": str(table)},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cpu = json.loads(table.read_text())
    assert set(cpu) == {"test_burn.py::test_child", "test_burn.py::test_nothing"}, cpu
    assert cpu["test_burn.py::test_child"] >= cpu["test_burn.py::test_nothing"] + 0.1, cpu
