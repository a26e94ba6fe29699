"""`rlvr train` under faults a user can see (issue 22): task checks before the model loads and no
run directory left by a failed start, leakage checked when training starts, failed verifications
warned about and reflected in the exit code, a full disk during a checkpoint.

Runs use tiny random models built here in a second: these tests check containment and reporting,
not learning. Where the exit code or the console is the point, `rlvr` runs in a process of its own
(`rlvr_forked`: forked from the test process's fork server, without a new interpreter's imports;
torchrun's ranks are real commands); where what a stopped run leaves and its resume are, in this
process (`cli`, with the ``testing/*`` environments of the ``testing_envs`` fixture): the imports of
a new interpreter cost far more than such a run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import tasks
from envs.types import Problem
from rlvr.cli import main
from tasks.dataset import DataSource, DatasetTask
from tests.rlvr.test_cli_hardening import _tiny, rlvr_forked, testing_envs  # noqa: F401 (a fixture, requested by name)
from tests.rlvr.test_multinode import cli

QUIET = ("log.progress=false", "log.plot=false", "log.tensorboard=false", "threads=1")
SMALL = ("update.steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
         "eval.at_start=false", "eval.every=0")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return _tiny(tmp_path_factory.mktemp("tiny") / "final")


# -- task checks come before the model loads; a failed start leaves no run directory -----------------


@pytest.mark.parametrize("extra,message", [
    (("eval.every=1", "eval.split=nosuch"), "eval.split='nosuch': task arithmetic-v1 has no such split"),
    (("task.split=nosuch",), "task.split='nosuch': task arithmetic-v1 has no such split"),
    (("task.split=test",), "task.split='test' is a held-out split of arithmetic-v1"),
])
def test_a_bad_split_is_refused_before_the_model_loads_naming_the_key(extra, message, tmp_path, capsys):
    # the model does not exist: reaching it would be a different error
    code = main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tmp_path / 'no-model'}", *QUIET, *extra])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_run_that_fails_before_its_first_step_leaves_nothing_that_blocks_the_rerun(tiny_model, tmp_path, capsys):
    bad = main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tmp_path / 'no-model'}", *QUIET, *SMALL])
    assert bad != 0 and not (tmp_path / "run").exists()
    capsys.readouterr()
    # the corrected command runs as typed (no overwrite=true needed)
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL,
                 "update.steps=1"]) == 0
    assert (tmp_path / "run" / "final").is_dir()


# -- leakage between the training split and held-out data ---------------------------------------


class _LeakyQA(DatasetTask):
    """A plugin-style dataset task whose test split repeats one training question."""

    env_id = "math-v1"
    required_fields = ("question", "answer")
    splits = ("train", "validation", "test")
    heldout_splits = ("validation", "test")

    def __init__(self, folder: str):
        self.sources = {s: DataSource(local=str(Path(folder) / f"{s}.jsonl")) for s in self.splits}

    def row_to_problem(self, row, split, index):
        return Problem(f"{split}/{index}", row["question"], str(row["answer"]))


def _leaky_task(folder: Path) -> str:
    rows = {
        "train": [(f"What is {i} + {i}?", 2 * i) for i in range(40)],
        "validation": [(f"What is {i} + 1000?", i + 1000) for i in range(10)],
        "test": [(f"What is {i} + 2000?", i + 2000) for i in range(9)] + [("What is 7 + 7?", 14)],
    }
    folder.mkdir(parents=True, exist_ok=True)
    for split, items in rows.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in items))
    tasks.register("testing-leaky-qa-v1", _LeakyQA, kwargs={"folder": str(folder)}, override=True)
    return "testing-leaky-qa-v1"


def test_training_on_a_split_that_leaks_into_held_out_data_warns_or_is_refused(tmp_path, capsys):
    task_id = _leaky_task(tmp_path / "data")
    common = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tmp_path / 'no-model'}",
              f"task.id={task_id}", *QUIET]
    assert main([*common, "task.leakage=refuse"]) == 2
    err = capsys.readouterr().err
    assert "shares questions with held-out data" in err and "what is 7 + 7?" in err.lower()
    assert not (tmp_path / "run").exists()

    main(common)  # warns, then goes on to load the (missing) model
    out = capsys.readouterr()
    assert "warning: task testing-leaky-qa-v1: the training split 'train' shares questions" in out.out + out.err
    assert "no-model" in out.err

    main([*common, "task.leakage=off"])
    out = capsys.readouterr()
    assert "shares questions" not in out.out + out.err


# -- failed verifications reach the console and the exit code -------------------------------------


def test_a_run_whose_every_verification_failed_warns_each_step_and_exits_non_zero(tiny_model, tmp_path):
    out = rlvr_forked("train", "quickstart", f"output_dir={tmp_path}", "name=fail", f"model.name_or_path={tiny_model}",
               "task.env=testing/raise-v1", *QUIET, *SMALL, cwd=tmp_path, timeout=300)
    console = out.stdout + out.stderr
    assert out.returncode == 1, console[-2000:]
    assert "warning: step 1: 4 of 4 verifications failed (4 errors, 0 timeouts; first: RuntimeError: flaky verifier failed" in console
    assert "warning: step 2: 4 of 4 verifications failed" in console
    assert "error: 8 of 8 verifications failed over the run" in console
    assert "failed: every verification of the run failed" in console
    rows = [json.loads(line) for line in (tmp_path / "fail" / "metrics.jsonl").read_text().splitlines()]
    assert rows and not any("reward/mean" in r or "reward/accuracy" in r for r in rows)  # no reward figure: not a drop to 0


def test_a_run_with_some_failed_verifications_completes_and_summarises_them(tiny_model, tmp_path):
    out = rlvr_forked("train", "quickstart", f"output_dir={tmp_path}", "name=flaky", f"model.name_or_path={tiny_model}",
               "task.env=testing/raise-v1", "task.env_kwargs={always_raise: false, raise_every: 2}", *QUIET, *SMALL,
               cwd=tmp_path, timeout=300)
    console = out.stdout + out.stderr
    assert out.returncode == 0, console[-2000:]
    assert "warning: step 1: 2 of 4 verifications failed" in console
    assert "warning: 4 of 8 verifications failed over the run (4 errors, 0 timeouts; first: RuntimeError" in console


# -- a full disk while writing a checkpoint ---------------------------------------------------------


def _can_mount_tmpfs(where: Path) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", str(where)], check=True)
    return ok


def test_a_full_disk_during_a_checkpoint_is_one_line_and_the_run_resumes_once_space_is_freed(tiny_model, tmp_path):
    disk = tmp_path / "disk"
    if not _can_mount_tmpfs(disk):
        pytest.skip("needs root to mount a small tmpfs (a real full disk)")
    # room for the run's logs and a checkpoint or two (each a little more than the model folder), not for six
    model_bytes = sum(f.stat().st_size for f in tiny_model.rglob("*") if f.is_file())
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={model_bytes * 3}", "tmpfs", str(disk)], check=True)
    try:
        args = ("train", "quickstart", f"output_dir={disk}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL,
                "update.steps=6", "log.checkpoint_every=1", "log.keep_checkpoints=6")
        full = rlvr_forked(*args, cwd=tmp_path, timeout=300)
        assert full.returncode == 1, (full.stdout + full.stderr)[-2000:]
        errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in full.stderr, full.stderr[-2000:]
        assert f"no space left on device writing {disk / 'run' / 'checkpoints' / 'step-'}" in errors[0]
        assert "needed" in errors[0] and "free there" in errors[0] and "--resume" in errors[0]
        assert not list((disk / "run" / "checkpoints").glob("*.tmp"))  # the partial write is gone

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # space freed
        resumed = rlvr_forked("train", str(disk / "run"), "--resume", cwd=tmp_path, timeout=300)
        assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-2000:]
        assert "completed: 6 steps" in resumed.stdout
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def test_a_partial_checkpoint_left_by_a_kill_is_removed_when_the_run_resumes(tiny_model, tmp_path, capsys):
    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL]
    assert main([*args, "update.steps=1"]) == 0
    partial = tmp_path / "run" / "checkpoints" / "step-2.tmp"
    shutil.copytree(tmp_path / "run" / "checkpoints" / "step-1", partial)  # as a kill in the middle of step 2's write leaves it
    (partial / "trainer_state.pt").unlink()
    assert main(["train", str(tmp_path / "run"), "--resume", "update.steps=2"]) == 0
    assert f"removed the partial checkpoint {partial}" in capsys.readouterr().out
    assert not partial.exists() and (tmp_path / "run" / "checkpoints" / "step-2").is_dir()


def test_a_resume_refuses_a_damaged_decoder_choice_in_one_line_and_takes_a_named_decoder(tiny_model, tmp_path, capsys):
    """The decoder `auto` chose is kept in the checkpoint so that a resume samples as before; a damaged one
    is refused before training, naming the field and the way out, which works."""
    import torch

    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL]
    assert main([*args, "update.steps=1"]) == 0
    assert "decoder: kv on cpu (the only candidate there: not timed)" in capsys.readouterr().out
    state_file = tmp_path / "run" / "checkpoints" / "step-1" / "trainer_state.pt"
    state = torch.load(state_file, weights_only=False)
    assert state["recipe"]["decoder_choice"]["name"] == "kv"
    state["recipe"]["decoder_choice"]["seconds"] = "x"  # would pass unnoticed until an evaluation printed it
    torch.save(state, state_file)
    resume = ["train", str(tmp_path / "run"), "--resume", "update.steps=2"]
    assert main(resume) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if "error" in line] == ["error: this checkpoint's rollout state is damaged: decoder_choice.seconds is 'x', not a number; "
                                        "resume with rollout.hf.decode=kv (or name another decoder) to choose the decoder afresh"], err
    assert main([*resume, "rollout.hf.decode=kv"]) == 0
    assert json.loads((tmp_path / "run" / "resources.json").read_text())["decoder"] == {"name": "kv", "named": True}  # kept, not measured
    state["recipe"]["decoder_choice"]["seconds"] = 0.5
    torch.save(state, state_file)
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step-2")
    assert main([*resume, "rollout.hf.decode=auto"]) == 0  # (the run's config kept the kv named above)
    assert "decoder: kv on cpu, chosen before the resume (the only candidate there: not timed)" in capsys.readouterr().out


def test_a_run_that_never_took_an_optimizer_step_says_so_and_what_to_change(tiny_model, tmp_path, capsys):
    """top_k=1 samples every completion of a group alike: equal rewards, no gradient, every update skipped. The run
    completes, but its final model is the starting one, which a user must hear of, not find out from a metric."""
    args = ["train", "quickstart", f"output_dir={tmp_path}", f"model.name_or_path={tiny_model}", *QUIET, *SMALL]
    assert main([*args, "name=alike", "rollout.top_k=1"]) == 0
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "alike" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("train/skipped_no_signal") for r in rows] == [1.0, 1.0]
    assert "warning: the run took no optimizer step" in out and "rollout.top_k=0" in out
    # DAPO's dynamic sampling drops every group instead (train/skipped_no_group): the same end, the same warning
    assert main([*args, "name=dapo", "rollout.top_k=1", "algo.preset=dapo"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "dapo" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("train/skipped_no_group") for r in rows] == [1.0, 1.0]
    assert "warning: the run took no optimizer step" in capsys.readouterr().out
    # a run whose steps all update (SFT's, on the same untrained model) says nothing of the kind
    assert main(["sft", "sft_quickstart", f"output_dir={tmp_path}", "name=sft", f"model.name_or_path={tiny_model}", *QUIET, "steps=2",
                 "eval.limit=2", "eval.max_new_tokens=4"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["spent/optimizer_steps"] for r in rows if "spent/optimizer_steps" in r] == [1, 2]
    assert "optimizer step" not in capsys.readouterr().out


def test_a_named_decoder_that_cannot_run_here_is_recorded_with_what_ran_instead(tiny_model, tmp_path):
    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL]
    with pytest.warns(RuntimeWarning, match="rollout.hf.decode=cuda_graph cannot run here"):
        assert main([*args, "update.steps=1", "rollout.hf.decode=cuda_graph"]) == 0  # a GPU's decoder, on a CPU
    decoder = json.loads((tmp_path / "run" / "resources.json").read_text())["decoder"]
    assert decoder == {"name": "generate", "named": True, "asked": "cuda_graph"}


def test_evaluation_reports_name_the_weights_they_evaluated_before_and_after_a_resume(tiny_model, tmp_path, monkeypatch):
    small = [a for a in SMALL if not a.startswith("eval.")]
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *small,
                 "update.steps=1", "eval.at_start=true", "eval.every=1", "eval.limit=2"]) == 0
    monkeypatch.chdir(tmp_path)  # resumed through a relative path: the reports still name the run's one folder
    assert main(["train", "run", "--resume", "update.steps=2"]) == 0
    run = (tmp_path / "run").resolve()
    reports = {n: json.loads((run / "reports" / f"eval-step-{n}.json").read_text()) for n in (0, 1, 2)}
    assert {n: r["model"] for n, r in reports.items()} == {0: f"{tiny_model} (the start of {run} at step 0)", 1: f"{run} at step 1",
                                                          2: f"{run} at step 2"}
    # and their provenance, as `rlvr eval`'s reports have it: the code and libraries of the run, the starting model's weight hash
    from rlvr.eval.provenance import weights_sha256

    run_provenance = json.loads((run / "provenance.json").read_text())
    for n, report in reports.items():
        provenance = report["provenance"]
        assert provenance["code"] == run_provenance["code"] and provenance["libraries"] == run_provenance["libraries"]
        assert provenance["created_utc"] == report["created_utc"] and provenance["task"]["id"] == "arithmetic-v1"
    assert reports[0]["provenance"]["model"]["weights_sha256"] == weights_sha256(tiny_model) is not None
    assert [reports[n]["provenance"]["model"] for n in (1, 2)] == [{"run_dir": str(run), "step": 1}, {"run_dir": str(run), "step": 2}]


def test_overwrite_never_deletes_what_a_run_did_not_make(tiny_model, tmp_path, capsys):
    """A new run refuses a folder that holds files already and a folder inside another run: overwrite=true deletes a run
    folder whole, and the user's files (or the other run) would go with it."""
    args = ["train", "quickstart", f"output_dir={tmp_path}", f"model.name_or_path={tiny_model}", *QUIET, *SMALL, "update.steps=1"]
    (tmp_path / "userdata").mkdir()
    (tmp_path / "userdata" / "important.txt").write_text("keep me")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    (tmp_path / "link").symlink_to(outside)
    for name in ("userdata", "link"):
        for extra in ([], ["overwrite=true"]):
            assert main([*args, f"name={name}", *extra]) == 2
            assert f"holds files that are not a run" in capsys.readouterr().err
    assert (tmp_path / "userdata" / "important.txt").read_text() == "keep me" and (outside / "precious.txt").read_text() == "keep me"
    assert main([*args, "name=a/b"]) == 0  # a nested run, below a folder that is no run
    for name in ("a", "a/b/c"):  # the folder holding it, and a folder inside it
        assert main([*args, f"name={name}", "overwrite=true"]) == 2
    assert "is inside the run" in capsys.readouterr().err
    assert (tmp_path / "a" / "b" / "config.yaml").is_file()
    assert main([*args, "name=a/b", "overwrite=true"]) == 0  # the run itself is overwritten as before


def test_a_run_started_with_a_relative_model_path_resumes_from_another_folder(tiny_model, tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "start").symlink_to(tiny_model)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["train", "quickstart", "output_dir=runs", "name=run", "model.name_or_path=models/start", *QUIET, *SMALL, "update.steps=1",
                 "overwrite=true"]) == 0
    saved = yaml.safe_load((tmp_path / "runs" / "run" / "config.yaml").read_text())["model"]["name_or_path"]
    assert saved == str(tmp_path / "models" / "start")  # absolute, and still the path the user named (not the link's target)
    monkeypatch.chdir(tmp_path / "elsewhere")  # the relative path would name elsewhere/models/start here
    assert main(["train", "../runs/run", "--resume", "update.steps=2"]) == 0
    assert [json.loads(line)["step"] for line in (tmp_path / "runs" / "run" / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    # the resumed run's config.yaml records no resume and no overwrite (this run was started with overwrite=true): given to
    # `rlvr train` it neither continues this run unasked nor deletes it
    saved = yaml.safe_load((tmp_path / "runs" / "run" / "config.yaml").read_text())
    assert (saved["resume"], saved["overwrite"]) == (False, False)
    assert main(["train", "../runs/run/config.yaml", "update.steps=3"]) == 2  # (the run's folder exists: --resume or overwrite)
    assert len((tmp_path / "runs" / "run" / "metrics.jsonl").read_text().splitlines()) == 2


def test_an_sft_report_of_the_built_model_says_what_built_it(tmp_path):
    assert main(["sft", "sft_quickstart", f"output_dir={tmp_path}", "name=sft", *QUIET, "steps=1", "eval.at_start=true", "eval.every=1",
                 "eval.limit=2", "eval.max_new_tokens=2", "tiny.layers=1", "seed=7"]) == 0
    model = json.loads((tmp_path / "sft" / "reports" / "eval-step-0.json").read_text())["provenance"]["model"]
    assert model["name"] == "tiny" and model["built"]["layers"] == 1 and model["seed"] == 7  # no weights to hash: what built them


def test_an_eval_limit_beyond_the_split_is_said_once_per_run(tiny_model, tmp_path, capsys):
    small = [a for a in SMALL if not a.startswith("eval.")]
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *small,
                 "eval.at_start=true", "eval.every=1", "eval.limit=100000", "eval.max_new_tokens=1"]) == 0
    out = capsys.readouterr().out
    assert out.count("warning: eval.limit: the evaluation limit 100000 is more than the 200 problems of arithmetic-v1's "
                     "'validation' split: all 200 are evaluated") == 1, out  # three evaluations (steps 0, 1, 2), one line
    reports = sorted((tmp_path / "run" / "reports").glob("eval-step-*.json"))
    assert len(reports) == 3 and all(json.loads(r.read_text())["limit_beyond_split"] for r in reports)


def test_fsdp_in_a_single_process_says_it_is_off(tiny_model, tmp_path, capsys):
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL,
                 "update.steps=1", "distributed=fsdp", "model.precision=bf16"]) == 0
    assert "distributed=fsdp has no effect in a single process (FSDP is off)" in capsys.readouterr().out


# -- one run per run directory ------------------------------------------------------------------------


def test_a_second_run_on_a_held_run_directory_is_refused_and_a_killed_holder_never_blocks_resume(tiny_model, tmp_path, capsys):
    import signal
    import sys

    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL]
    assert main([*args, "update.steps=1"]) == 0
    # another live run holds the folder (a real process holding the lock, as a resubmitted job's first attempt would)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom rlvr.runs import RunLock\nlock = RunLock.acquire(sys.argv[1])\n"
                               "print('held', flush=True)\ntime.sleep(300)\n", str(tmp_path / "run")],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main([*args, "resume=true"]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run (pid {holder.pid} on" in err, err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (tmp_path / "run" / ".run.lock").exists()  # the killed holder's lock file stays, its lock does not
    assert main([*args, "resume=true"]) == 0
    assert [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_step_that_failed_and_is_run_again_on_resume_is_tallied_once(tiny_model, tmp_path, testing_envs):
    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL,
            "update.steps=3", "task.env=testing/raise-v1", "verify.max_failed_steps=1"]
    # the verifier dies after step 1: step 2 fails, the run stops with a checkpoint of step 1
    code, console = cli([*args, "task.env_kwargs={always_raise: false, raise_every: 0, raise_after: 4}"])
    assert code != 0 and (tmp_path / "run" / "checkpoints" / "step-1").is_dir(), console[-2000:]
    code, console = cli([*args, "task.env_kwargs={always_raise: false, raise_every: 0}", "resume=true"])
    assert code == 0, console[-2000:]
    assert "verifications failed over the run" not in console, console[-2000:]  # step 2's failures were rolled back with it
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3] and all("reward/mean" in r for r in rows)


@pytest.mark.parametrize("every,calls,kept,resumed", [(1, 12, ["step-2", "step-3"], [4, 5, 6, 7, 8]), (4, 20, ["step-4", "step-6"], [7, 8])],
                         ids=["checkpoint-every-step", "checkpoint-before-the-streak"])
def test_an_asynchronous_run_stopped_by_an_outage_keeps_its_checkpoint_from_before_and_resumes(tiny_model, tmp_path, testing_envs, every,
                                                                                               calls, kept, resumed):
    """The verifier dies after ``calls`` verifications (4 a step) of an 8-step run at k = 2 (the worker
    generates two batches ahead, whose verifications fail too): two steps fail and the run stops.
    Checkpointing every step, none is written for the failed steps (the rotation keeps step-3, from
    before the outage); checkpointing every 4, the stop saves step 6 (step 5 trained) without the failed
    batches, and with the batch of step 7 that the failed step had taken (a resume used to wait for it
    until rollout.async.timeout_s: "stuck: done"). A resume once the verifier works generates the
    failed batches again and completes."""
    args = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL,
            "update.steps=8", "rollout.async.max_staleness=2", "rollout.async.timeout_s=60", f"log.checkpoint_every={every}",
            "log.keep_checkpoints=2", "task.env=testing/raise-v1", "verify.max_failed_steps=2"]
    code, said = cli([*args, f"task.env_kwargs={{always_raise: false, raise_every: 0, raise_after: {calls}}}"])
    assert code != 0 and "every verification failed for 2 consecutive steps" in said, said[-2000:]
    run = tmp_path / "run"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == kept, said[-2000:]
    code, said = cli([*args, "task.env_kwargs={always_raise: false, raise_every: 0}", "resume=true"])
    assert code == 0 and f"resumed from {run / 'checkpoints' / kept[-1]}" in said, said[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    tail = rows[-len(resumed):]
    assert [r["step"] for r in tail] == resumed and all(r["verify/errors"] == 0 for r in tail), rows
    assert json.loads((run / "run_state.json").read_text())["status"] == "completed"


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of torchrun's worker ``rank`` (a child of the launcher with ``RANK`` in its environment)."""
    for child in Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split():
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return int(child)
    return None


@pytest.mark.parametrize("target", ["rank-1", "launcher"])
def test_sigterm_to_one_torchrun_rank_or_to_torchrun_stops_every_rank_with_a_checkpoint(tiny_model, tmp_path, target):
    """SIGTERM reaches rank 1 only (a node's scheduler, an operator's kill): every rank agrees at the
    next step boundary, all checkpoint that step and exit together (rank 1 used to stop alone and wait
    in the checkpoint's barrier while rank 0 waited in the next step's collective, for ever). SIGTERM
    to torchrun (Ctrl-C, scancel) reaches every rank, each at its own moment: the same agreement, and
    ``--shutdown-timeout`` (docs/scaling.md) gives the ranks the time to finish the step and save."""
    import signal
    import sys
    import time

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--shutdown-timeout", "600", "-m", "rlvr.cli", "train", "quickstart",
           f"output_dir={tmp_path}", "name=run", f"model.name_or_path={tiny_model}", *QUIET, *SMALL, "update.steps=2000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ranks: list[int] = []
    try:
        while proc.poll() is None and not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().strip()):
            time.sleep(0.2)
        ranks = [pid for pid in (_rank_pid(proc.pid, r) for r in (0, 1)) if pid is not None]
        rank1 = _rank_pid(proc.pid, 1)
        assert proc.poll() is None and rank1 is not None, proc.stdout.read()[-2000:]
        os.kill(rank1 if target == "rank-1" else proc.pid, signal.SIGTERM)
        said, _ = proc.communicate(timeout=300)  # a deadlock guard: the run ends at its next step boundary
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in ranks:  # torchrun starts each rank in a session of its own: a deadlocked one outlives it
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert "SIGTERM: stopping after this step and saving a checkpoint (process 1 of 2" in said, said[-3000:]
    assert "forcefully exiting" not in said, said[-3000:]  # torchrun did not have to SIGKILL a rank
    steps = len((run / "metrics.jsonl").read_text().splitlines())
    assert json.loads((run / "run_state.json").read_text())["status"] == "interrupted" and steps < 2000, said[-3000:]
    assert (run / "checkpoints" / f"step-{steps}").is_dir() and not list((run / "checkpoints").glob("*.tmp")), said[-3000:]
