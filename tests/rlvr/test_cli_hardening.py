"""The command line under hostile input (issue 13): hanging and broken verifiers on every path that
verifies, evaluation that says what it measured, one-line errors and honest exit codes.

Where the exit code or exiting at all is the point, `rlvr` runs as a real subprocess (with the
misbehaving ``testing/*`` environments registered first) under a timeout, so that a regression
fails the test instead of hanging it. Models are tiny random ones built here in a second: these
tests check containment and reporting, not accuracy.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rlvr.cli import main

WITH_TESTING_ENVS = ("import sys, envs.testing; envs.testing.register_testing_envs(); "
                     "from rlvr.cli import main; sys.exit(main(sys.argv[1:]))")


def rlvr(*argv: str, cwd: Path, env: dict[str, str | None] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``rlvr ARGV`` in a child process (cwd: a scratch folder, never the checkout); ``env``
    entries set to None are removed."""
    environ = {**os.environ}
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return subprocess.run([sys.executable, "-c", WITH_TESTING_ENVS, *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=environ)


def rlvr_forked(*argv: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`rlvr` in a process of its own forked without a new interpreter's imports (`tests.forked`), for a
    test of its exit status and console that is not about how a fresh interpreter exits."""
    from tests.forked import run_forked

    return run_forked(list(argv), {**os.environ, **(env or {})}, timeout=timeout, cwd=cwd, testing_envs=True)


def _tiny(out: Path, seed: int = 0, max_positions: int = 256) -> Path:
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64,
                                            max_positions=max_positions, seed=seed), out)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return _tiny(tmp_path_factory.mktemp("tiny") / "final")


@pytest.fixture(autouse=True, scope="module")
def testing_envs():
    import envs
    from envs.testing import register_testing_envs

    register_testing_envs()
    yield
    for env_id in ("testing/hang-v1", "testing/raise-v1", "testing/nan-v1", "testing/segfault-v1", *(f"testing/step-{f}-v1" for f in ("hang", "raise", "junk", "huge"))):
        envs.ENVS.unregister(env_id)


NO_HUB = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": None, "HF_DATASETS_OFFLINE": None}
"""An environment without the hub (nothing listens on port 9) and without offline mode."""


# -- rlvr envs check ------------------------------------------------------------------------------


def test_envs_check_stops_and_fails_on_a_verifier_that_never_returns(tmp_path):
    out = rlvr("envs", "check", "testing/hang-v1", "--task", "arithmetic-v1", "-n", "3", "--timeout", "1", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stderr
    assert "[FAIL] verification finishes: verifying" in out.stdout and "did not finish within 1 s" in out.stdout


@pytest.mark.parametrize("env_id,reason", [
    ("testing/raise-v1", "error: RuntimeError: flaky verifier failed"),
    ("testing/nan-v1", "invalid verdict: reward must be finite, got nan"),
])
def test_envs_check_fails_on_a_verifier_that_never_judges(env_id, reason, tmp_path):
    out = rlvr("envs", "check", env_id, "--task", "arithmetic-v1", "-n", "3", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r"\[FAIL\] verifier works: (\d+)/\1 verifications failed", out.stdout) and reason in out.stdout
    assert "differ" not in out.stdout  # a NaN reward is not a determinism failure
    assert "all checks passed" not in out.stdout


@pytest.mark.parametrize("env_id,check,reason", [
    ("testing/step-raise-v1", "steps work", "ex/0: step failed: RuntimeError: step exploded"),
    ("testing/step-junk-v1", "steps work", "ex/0: step failed: TypeError: FaultyStepEnv.step returned an observation of type dict"),
    ("testing/step-hang-v1", "step finishes", "step on ex/0 did not return within 1 s"),
])
def test_envs_check_plays_a_multi_turn_environment_through_its_step(env_id, check, reason, tmp_path):
    # issue 22: step() was never called, so these said "all checks passed" with exit code 0
    out = rlvr("envs", "check", env_id, "--timeout", "1", cwd=tmp_path, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(f"  [FAIL] {check}: "))
    assert reason in line and "all checks passed" not in out.stdout


def test_envs_check_skips_benchmarks_whose_data_is_absent(tmp_path):
    empty = tmp_path / "no-data"
    empty.mkdir()
    out = rlvr("envs", "check", "math-v1", "-n", "3", cwd=tmp_path, timeout=300,
               env={"RLVR_DATA_DIR": str(empty), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"math-v1 on gsm8k-v1:\n  \[skip\] data not available here: .*RLVR_DATA_DIR", out.stdout)
    assert "math-v1 on 3 problems of arithmetic-v1:" in out.stdout  # the procedural task is still checked
    assert "all checks passed (6 task(s) skipped)" in out.stdout


def test_a_dataset_task_without_data_or_hub_fails_fast_saying_what_to_set(tmp_path):
    script = "import tasks; tasks.make('gsm8k-v1').problems('test')"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**{k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")},
                              "RLVR_DATA_DIR": str(tmp_path), "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert "DataUnavailable" in last and "cannot be reached" in last and "set $RLVR_DATA_DIR to a folder that holds 'gsm8k/test.jsonl'" in last
    assert "Retrying" not in out.stderr  # no 30 s of retries against an unreachable hub


# -- rlvr eval: bad input before the model loads ----------------------------------------------------


@pytest.mark.parametrize("extra,message", [
    (["--n", "-3"], "--n must be in 0..65536, got -3"),
    (["--limit", "-1"], "--limit must be in 1..10000000, got -1"),
    (["--limit", "0"], "--limit must be in 1..10000000, got 0"),
    (["--temperature", "-1"], "--temperature must be >= 0 and finite, got -1.0"),
    (["--n", "2", "--temperature", "inf"], "--temperature must be >= 0 and finite, got inf"),  # report.json held Infinity
    (["--n", "4", "--temperature", "0"], "--temperature must be > 0 to draw 4 samples"),
    (["--top-p", "0"], "--top-p must be in (0, 1], got 0.0"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be in 1..1048576 (as training's), got 0"),
    (["--verify-timeout", "0"], "--verify-timeout must be > 0 seconds"),
    (["--verify-workers", "-1"], "--verify-workers must be in 0..1024, got -1"),
    (["--threads", "-2"], "--threads must be in 0..4096, got -2"),
    (["--no-greedy"], "--no-greedy with --n 0 measures nothing"),
    (["--env", "nope-v1"], "unknown environment 'nope-v1'"),
    (["--task", "nope-v1"], "--task: unknown task 'nope-v1'"),  # (named as --env is)
    (["--env-kwargs", "[1, 2]"], "--env-kwargs must be a mapping"),
    (["--env-kwargs", "{nope: 1}"], "--env-kwargs: environment 'math-v1' does not accept {'nope': 1}"),
    (["--split", "train"], "split 'train' of arithmetic-v1 is unbounded: pass --limit N"),
])
def test_eval_options_are_checked_before_the_model_loads(extra, message, capsys):
    # the model does not exist: an option checked only after loading would report that instead
    assert main(["eval", "--model", "/nonexistent/model", "--task", "arithmetic-v1", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_run_folder_as_model_points_to_its_final_model(tiny_model, tmp_path, capsys):
    run = tmp_path / "runs" / "grpo"
    (run / "checkpoints").mkdir(parents=True)
    (run / "final").symlink_to(tiny_model, target_is_directory=True)
    assert main(["eval", "--model", str(run), "--task", "arithmetic-v1", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert f"is a run folder, not a model directory (no config.json): pass {run / 'final'}" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model,message", [
    ("runs/nothing/final", "model 'runs/nothing/final' not found: no such directory"),
    ("runs/nothing", "no such directory"),
    ("tiny", "model 'tiny' (the embedded model) is built only by `rlvr sft`"),  # was "no such directory"
])
def test_a_missing_relative_model_path_is_not_sent_to_the_hub(model, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for key, value in NO_HUB.items():
        monkeypatch.delenv(key, raising=False) if value is None else monkeypatch.setenv(key, value)
    assert main(["eval", "--model", model, "--task", "arithmetic-v1", "--limit", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


# -- rlvr eval: verifiers contained, the report says what it measured ------------------------------


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_eval_bounds_a_verifier_that_never_returns_and_exits_non_zero(kind, tiny_model, tmp_path):
    out = rlvr("eval", "--model", str(tiny_model), "--task", "arithmetic-v1", "--limit", "3", "--max-new-tokens", "8",
               "--env", "testing/hang-v1", "--verify-timeout", "0.5", "--verify-kind", kind, "--out", str(tmp_path / "r"),
               cwd=tmp_path, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "error: every verification failed (0 errors, 3 timeouts; first: timeout: no verdict within 0.5 s)" in out.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["greedy"]["timeouts"] == 3 and report["greedy"]["accuracy"] == 0.0
    assert {k: report["verify"][k] for k in ("verified", "timeouts", "kind", "workers", "timeout_s")} == {
        "verified": 3, "timeouts": 3, "kind": kind, "workers": 1, "timeout_s": 0.5}
    assert (report["task"]["env"], report["task"]["env_kwargs"]) == ("testing/hang-v1", {})


def test_eval_counts_malformed_verdicts_as_errors_with_the_reason(tiny_model, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["eval", "--model", str(tiny_model), "--task", "arithmetic-v1", "--limit", "3", "--n", "2",
                 "--max-new-tokens", "4", "--env", "testing/nan-v1", "--out", str(out)]) == 1
    report = json.loads((out / "report.json").read_text())
    assert report["greedy"]["errors"] == 3 and report["sampled"]["errors"] == 6 and report["sampled"]["mean@2"] == 0.0
    assert "invalid verdict: reward must be finite, got nan" in report["verify"]["first_failure"]
    assert "every verification failed (9 errors, 0 timeouts" in capsys.readouterr().err


def test_eval_env_kwargs_reach_the_environment(tiny_model, tmp_path, capsys):
    # every=1000: no completion of 8 tokens is 1000 characters long, so nothing hangs
    out = tmp_path / "r"
    assert main(["eval", "--model", str(tiny_model), "--task", "arithmetic-v1", "--limit", "3", "--max-new-tokens", "8",
                 "--env", "testing/hang-v1", "--env-kwargs", "{every: 1000}", "--verify-timeout", "5", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["task"]["env"], report["task"]["env_kwargs"]) == ("testing/hang-v1", {"every": 1000})
    assert report["verify"]["timeouts"] == 0


def test_eval_reports_of_two_models_do_not_overwrite_each_other_and_record_provenance(tmp_path, monkeypatch, capsys):
    import torch

    a, b = _tiny(tmp_path / "a" / "final", seed=1), _tiny(tmp_path / "b" / "final", seed=2)
    monkeypatch.chdir(tmp_path)
    for model in (a, b):
        assert main(["eval", "--model", str(model), "--task", "arithmetic-v1", "--limit", "2", "--max-new-tokens", "4"]) == 0
    folders = sorted(p.parent for p in (tmp_path / "runs" / "eval").glob("*/*/report.json"))
    assert len(folders) == 2 and {f.parent.name for f in folders} == {"arithmetic-v1-test"}
    reports = [json.loads((f / "report.json").read_text()) for f in folders]
    assert {r["model"] for r in reports} == {str(a), str(b)}
    hashes = {r["provenance"]["model"]["weights_sha256"] for r in reports}
    assert len(hashes) == 2 and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes)
    for folder, r in zip(folders, reports):
        prov = r["provenance"]
        assert datetime.fromisoformat(r["created_utc"]).utcoffset() == timezone.utc.utcoffset(None)
        assert prov["libraries"]["torch"] == torch.__version__ and prov["libraries"]["python"]
        assert Path(prov["model"]["path"]).is_absolute() and prov["report_dir"] == str(folder.resolve())
        assert prov["code"]["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", prov["code"]["commit"])
        assert prov["options"]["limit"] == 2
    # the same weights elsewhere hash the same
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in a.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    from rlvr.eval.provenance import weights_sha256

    assert weights_sha256(copy) == weights_sha256(a) in hashes


def test_eval_of_a_plugin_task_records_the_plugins_package_and_version(tiny_model, tmp_path):
    # issue 22: provenance named rlvr's commit only, not the plugin that supplied the task and environment
    from tests.plugins import install_acme

    site = install_acme(tmp_path / "site", version="0.3.1")
    path = os.pathsep.join([str(site), str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])
    out = rlvr("eval", "--model", str(tiny_model), "--task", "acme/sums-v1", "--limit", "2", "--max-new-tokens", "4",
               "--out", str(tmp_path / "r"), cwd=tmp_path, env={"PYTHONPATH": path}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    prov = json.loads((tmp_path / "r" / "report.json").read_text())["provenance"]
    assert prov["task"] == {"id": "acme/sums-v1", "class": "acme_rlvr.sums.SumsTask", "package": "acme-rlvr", "version": "0.3.1"}
    assert prov["env"] == {"id": "acme/sum-v1", "class": "acme_rlvr.env.SumEnv", "package": "acme-rlvr", "version": "0.3.1"}
    assert prov["options"]["task"] == "acme/sums-v1"  # the command's own record is kept beside them
    md = (tmp_path / "r" / "report.md").read_text()
    assert "- task `acme/sums-v1` from acme-rlvr 0.3.1" in md and "- environment `acme/sum-v1` from acme-rlvr 0.3.1" in md


def test_eval_of_a_builtin_task_names_rlvr_as_its_package(tiny_model, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["eval", "--model", str(tiny_model), "--task", "arithmetic-v1", "--limit", "2", "--max-new-tokens", "4", "--out", str(out)]) == 0
    prov = json.loads((out / "report.json").read_text())["provenance"]
    assert (prov["task"]["package"], prov["env"]["package"], prov["env"]["id"]) == ("rlvr", "rlvr", "math-v1")


def test_eval_limit_reads_an_unbounded_split_from_its_source(tiny_model, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["eval", "--model", str(tiny_model), "--task", "arithmetic-v1", "--split", "train", "--limit", "3",
                 "--max-new-tokens", "4", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["problems"] == 3 and report["split_size"] is None and report["data_checksum"] is None
    assert report["problems_checksum"].startswith("sha256:")
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 3


def test_eval_flags_completions_that_run_past_the_models_context(tmp_path, capsys):
    # a 40-position model: the prompts ("Compute 96-25.\n", about 16 tokens) plus 32 new tokens do not fit
    model = _tiny(tmp_path / "short" / "final", max_positions=40)
    out = tmp_path / "r"
    assert main(["eval", "--model", str(model), "--task", "arithmetic-v1", "--limit", "4", "--max-new-tokens", "32",
                 "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["context"]["length"] == 40
    over = report["context"]["problems_over"]
    assert over == report["greedy"]["over_context"] and over > 0
    assert f"{over} of 4 problems ran past the model's context of 40 tokens" in (out / "report.md").read_text()


# -- rlvr train: a hung verifier cannot keep the process alive -------------------------------------


def _train_tiny(model: Path, out: Path, name: str, *extra: str, timeout: float = 300, forked: bool = False) -> subprocess.CompletedProcess:
    """A tiny `rlvr train quickstart` run of 2 prompts x 2 completions of 8 tokens a step, in a child process
    (``forked``: `rlvr_forked`; else a fresh interpreter, for the tests of how it exits)."""
    return (rlvr_forked if forked else rlvr)("train", "quickstart", f"output_dir={out}", f"name={name}", f"model.name_or_path={model}", "rollout.prompts_per_step=2",
                "rollout.group_size=2", "rollout.max_new_tokens=8", "eval.at_start=false", "eval.every=0", "log.progress=false",
                "log.plot=false", "log.tensorboard=false", "threads=1", *extra, cwd=out, timeout=timeout)


def test_train_with_a_verifier_that_never_returns_finishes_and_counts_the_hang(tiny_model, tmp_path):
    out = _train_tiny(tiny_model, tmp_path, "hang", "task.env=testing/hang-v1", "verify.timeout_s=0.5", "update.steps=1")
    # the process exits; as every verdict of the run failed, with status 1 and a summary
    assert out.returncode == 1, out.stderr[-2000:]
    assert "4 of 4 verifications failed over the run (0 errors, 4 timeouts" in out.stdout + out.stderr
    metrics = [json.loads(line) for line in (tmp_path / "hang" / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["verify/timeouts"] == 4 and metrics[-1]["train/skipped"] == 1.0


def test_train_with_a_verifier_worker_that_segfaults_counts_errors_and_goes_on(tiny_model, tmp_path):
    out = _train_tiny(tiny_model, tmp_path, "segv", "task.env=testing/segfault-v1", "verify.kind=process", "update.steps=2", forked=True)
    # both steps ran; as every verdict of the run failed, it ends with status 1 naming the signal
    assert out.returncode == 1, out.stderr[-2000:]
    assert "failed: every verification of the run failed" in out.stdout and "killed by SIGSEGV" in out.stdout
    metrics = [json.loads(line) for line in (tmp_path / "segv" / "metrics.jsonl").read_text().splitlines()]
    assert [m["verify/errors"] for m in metrics if "verify/errors" in m] == [4, 4]
    assert all(m["train/skipped"] == 1.0 for m in metrics if "train/skipped" in m)


def test_train_with_a_step_that_never_returns_exits_after_completing(tiny_model, tmp_path):
    # issue 22: the steps timed out and it printed "completed: 2 steps", then never exited: the
    # step runner's threads were joined at interpreter exit (the subprocess timeout catches that)
    out = _train_tiny(tiny_model, tmp_path, "step-hang", "task.env=testing/step-hang-v1", "task.env_kwargs={step_timeout_s: 0.5}",
                      "update.steps=2", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "completed: 2 steps" in out.stdout
    metrics = [json.loads(line) for line in (tmp_path / "step-hang" / "metrics.jsonl").read_text().splitlines()]
    assert sum(m["episode/step_failures"] for m in metrics) > 0 and sum(m["verify/timeouts"] for m in metrics) > 0


# -- rlvr sandbox run and rlvr verify: exit codes and bad files -------------------------------------


def _sandbox_available() -> bool:
    import sandboxes

    return any(avail.ok for spec, avail in sandboxes.availability_report() if spec.priority is not None)


@pytest.mark.skipif(not _sandbox_available(), reason="no sandbox backend runs here (see rlvr sandbox info)")
@pytest.mark.parametrize("program,code,status", [
    ("print('hi')\n", 0, "status=ok"),
    ("import sys\nsys.exit(3)\n", 3, "status=ok exit=3"),
    ("def f(:\n", 1, "status=ok exit=1"),
    ("import time\ntime.sleep(30)\n", 124, "status=timeout"),
    ("x = bytearray(1 << 31)\n", 1, "status=memory"),
])
def test_sandbox_run_exit_code_says_how_the_program_ended(program, code, status, tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(program)
    out = rlvr("sandbox", "run", str(path), "--wall", "1", "--memory", "256", cwd=tmp_path, timeout=120,
               env={"PYTHONWARNINGS": "always::ResourceWarning"})
    assert out.returncode == code, out.stderr
    assert status in out.stderr
    assert "unclosed" not in out.stderr  # the program's file and the sandbox's own files are closed, not left to the exit


def test_sandbox_run_refuses_a_binary_file_in_one_line(tiny_model, tmp_path):
    out = rlvr("sandbox", "run", str(tiny_model / "model.safetensors"), cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: ") and "is not a UTF-8 text file" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_verify_refuses_binary_input_and_a_non_finite_timeout(tmp_path):
    binary = subprocess.run([sys.executable, "-c", WITH_TESTING_ENVS, "verify", "--gold", "1", "--response", "-"],
                            input=b"\xc0\x0f1", capture_output=True, timeout=120, cwd=tmp_path)
    assert binary.returncode == 2 and b"standard input is not UTF-8 text" in binary.stderr
    nan = rlvr("verify", "--gold", "1", "--response", "Answer: 1", "--timeout", "nan", cwd=tmp_path, timeout=120)
    assert nan.returncode == 2 and "--timeout must be > 0 seconds and finite, got nan" in nan.stderr
