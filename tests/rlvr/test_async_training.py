"""Asynchronous runs end to end on the quickstart's SFT base (``rollout.async``): the staleness bound
holds every step, partial rollouts mix versions within it, PPO's critic and PRIME's reward model train
on the batches the policy does, a sync that does not arrive stops the run, a generation worker that
dies is started again and its round regenerated (the run ends as an uninterrupted one) or the run
stops naming it, and a stuck side is named. SIGKILL with samples in flight and --resume is in
test_fault_injection.py."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.rollout.sync import WeightSyncError
from rlvr.train import TrainConfig, train
from rlvr.train.recipes import load_run_config
from tests.forked import ForkedCLI
from tests.rlvr.test_resume import _rows, _tensors

REPO = Path(__file__).resolve().parents[2]
SMALL = ("rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4", "rollout.max_new_tokens=32", "eval.every=0",
         "eval.at_start=false", "log.tensorboard=false", "log.plot=false", "optim.warmup_steps=0")

pytestmark = pytest.mark.slow


def _cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    """``rlvr ARGV`` run by the CLI's `main` in this process (no imports paid again), its exit code and
    console; ``env`` (``RLVR_WORKER_*``: faults of the generation worker, a process of its own that
    inherits it) is set for the call only."""
    assert all(k.startswith("RLVR_WORKER_") for k in env), env  # this process's own fault points were read at import
    saved = {k: os.environ.get(k) for k in env}
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["rlvr", *argv], code, out.getvalue(), err.getvalue())


def test_an_asynchronous_run_never_trains_a_sample_older_than_k(sft_base, tmp_path, rl_overrides):
    k, steps = 2, 6
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, f"update.steps={steps}", f"rollout.async.max_staleness={k}",
                                                              *SMALL))
    assert train(cfg).status == "completed"
    rows = _rows(tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        n = r["step"]
        assert r["async/staleness_max"] <= k and r["async/dropped_stale"] == 0
        assert r["async/staleness_max"] == min(k, n - 1)  # the worker runs k batches ahead as soon as it can
        hist = {int(key.rsplit("/", 1)[1]): v for key, v in r.items() if key.startswith("async/staleness_hist/")}
        assert hist == {min(k, n - 1): 16.0}  # 4 prompts x 4 completions, all of one version
        assert r["async/version"] == max(0, n - 1 - k) and r["async/round"] == n
        assert 0 <= r["async/queue_depth"] <= k and 0 <= r["async/trainer_idle_frac"] <= 1 and r["async/samples_per_s"] > 0
    gaps = [r.get("sync/logprob_gap_mean") for r in rows]
    assert None not in gaps and max(gaps) < 1e-5  # the version behind every batch was proven, the first one's too
    assert [r["rollout/staleness"] for r in rows] == [float(min(k, r["step"] - 1)) for r in rows]  # the policy's optimizer steps
    resources = json.loads((tmp_path / "run" / "resources.json").read_text())
    assert resources.get("decoder", {}).get("name")  # the worker measured its decoders and reported the choice
    saved = _async_state(tmp_path / "run" / "checkpoints" / f"step-{steps}")
    assert saved["rounds"] == [] and saved["producer"].round == steps  # no batch past the last step was generated or waited for


def _async_state(checkpoint: Path) -> dict:
    """The asynchronous pipeline's state in a checkpoint (`AsyncRollouts.state_dict`)."""
    def find(node):
        if isinstance(node, dict):
            if "rounds" in node and "producer" in node:
                return node
            return next((f for f in map(find, node.values()) if f is not None), None)
        return None

    return find(torch.load(checkpoint / "trainer_state.pt", weights_only=False)["recipe"])


def test_partial_rollouts_mix_versions_within_the_bound(sft_base, tmp_path, rl_overrides):
    """With a 16-token budget the worked answers (25 to 30 tokens) are cut and continued after the
    next push; they finish one round later, with the tokens of two versions, and are still within k."""
    k = 2
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "update.steps=5", f"rollout.async.max_staleness={k}",
                                                              "rollout.async.partial=true", "rollout.async.partial_tokens=16", *SMALL))
    assert train(cfg).status == "completed"
    rows = _rows(tmp_path / "run")
    assert all(r.get("async/staleness_max", 0) <= k and r["async/dropped_stale"] == 0 for r in rows)
    assert any(r.get("async/mixed_version_frac", 0) > 0 for r in rows[2:])  # continued generations: their tokens carry two versions
    assert any(r["async/parked_groups"] > 0 for r in rows)
    # every batch starts its own prompts: after the first, whose long groups all wait, each step trains on something
    assert all(r.get("batch/groups", 0) > 0 for r in rows[1:])
    assert all(r["async/version"] == max(0, r["step"] - 2) for r in rows)  # one round ahead of the trainer
    # every batch proves the version that sampled it, the first ones too (whose groups were all parked)
    assert all("sync/logprob_gap_mean" in r for r in rows), [sorted(k for k in r if k.startswith("sync/")) for r in rows]
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert any(len(s["completion"]) > 16 for s in samples)  # long answers made it through, whole


@pytest.mark.parametrize("preset", ["ppo", "prime"])
def test_learned_scorers_train_on_the_asynchronous_batches(sft_base, tmp_path, rl_overrides, preset):
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, f"algo.preset={preset}", "update.steps=3",
                                                              "rollout.async.max_staleness=1", *SMALL))
    assert train(cfg).status == "completed"
    rows = _rows(tmp_path / "run")
    scorer = "critic/value_loss" if preset == "ppo" else "prm/token_reward_mean"
    for r in rows:  # the scorer's numbers come from the very batch the policy trained on, one version stale after step 1
        if r.get("train/skipped"):
            continue
        assert scorer in r and r["async/staleness_max"] == min(1, r["step"] - 1)


def test_a_version_that_does_not_reach_the_worker_stops_the_run(sft_base, tmp_path, rl_overrides, monkeypatch):
    """Break the push on purpose (the shared-memory slot keeps the old weights): the probe the worker
    scores after loading a version disagrees with the trainer's log-probs of it and the run stops."""
    from rlvr.rollout.worker import WeightSlots

    real_stage = WeightSlots.stage
    staged = []

    def stage_only_the_first(self, i, weights):
        if not staged:
            real_stage(self, i, weights)
        staged.append(i)

    monkeypatch.setattr(WeightSlots, "stage", stage_only_the_first)
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "update.steps=6", "rollout.async.max_staleness=1",
                                                              "optim.lr=1e-3", *SMALL))
    with pytest.raises(WeightSyncError, match="did not arrive|rollout.probe.max_gap"):
        train(cfg)
    assert len(_rows(tmp_path / "run")) < 6
    assert json.loads((tmp_path / "run" / "run_state.json").read_text())["status"].startswith("failed: WeightSyncError")


# kv named: the worker's token count (where RLVR_WORKER_KILL_AT strikes) must not depend on which decoder auto measures fastest;
# these runs decode about 33 tokens a batch (166 over the 5 batches of a straight run)
ARGS = ("update.steps=4", "log.checkpoint_every=1", "rollout.hf.decode=kv", *SMALL)


def test_a_worker_that_dies_is_started_again_and_the_run_ends_as_an_uninterrupted_one(sft_base, tmp_path, rl_overrides):
    common = ("rollout.async.max_staleness=1", *ARGS)
    assert train(load_config(TrainConfig, "quickstart", rl_overrides(tmp_path / "straight", sft_base, *common))).status == "completed"
    # the worker SIGKILLs itself at its 40th decoded token (its second or third round); once: the new one runs clean
    died = _cli("train", "quickstart", *rl_overrides(tmp_path / "died", sft_base, *common), RLVR_WORKER_KILL_AT="generate:40")
    assert died.returncode == 0, died.stderr[-2000:]
    said = died.stdout + died.stderr
    assert "died: killed by SIGKILL in round" in said and "starting it again (1 of rollout.async.restarts=1)" in said, said[-2000:]
    rows = _rows(tmp_path / "died" / "run")
    assert sum(r["async/worker_restarts"] for r in rows) == 1
    assert [r["reward/mean"] for r in rows] == [r["reward/mean"] for r in _rows(tmp_path / "straight" / "run")]
    a, b = _tensors(tmp_path / "straight" / "run" / "checkpoints" / "step-4"), _tensors(tmp_path / "died" / "run" / "checkpoints" / "step-4")
    assert a.keys() == b.keys() and not [k for k in a if not torch.equal(a[k], b[k])]


def test_a_worker_that_dies_past_its_restarts_stops_the_run_naming_it(sft_base, tmp_path, rl_overrides, monkeypatch):
    # token 90 is in batch 3 or 4 (of 4): a checkpoint or two are written before (the one after step s waits for batch s + 1)
    out = _cli("train", "quickstart", *rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=1", "rollout.async.restarts=0", *ARGS),
               RLVR_WORKER_KILL_AT="generate:90")
    assert out.returncode == 1, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out.stderr[-2000:]
    assert "the generation worker (pid" in errors[0] and "died: killed by SIGKILL in round" in errors[0]
    run = tmp_path / "run"
    assert "rollout.async.restarts=0" in errors[0] and f"continue with `rlvr train {run} --resume`" in errors[0]
    assert "could not save" not in out.stdout + out.stderr and json.loads((run / "run_state.json").read_text())["status"].startswith("failed")
    last = max(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir() if not p.name.endswith(".tmp"))
    assert not list((run / "checkpoints").glob("*.tmp"))
    # the checkpoint after step last + 1 waited for batch last + 2, whose worker died: nothing was written after the death
    assert f"died: killed by SIGKILL in round {last + 2}" in errors[0] and len(_rows(run)) == last + 1
    # the resume has restarts of its own (the stopped run's were spent): its worker dies as well, once, and is started again
    monkeypatch.setenv("RLVR_WORKER_KILL_AT", "generate:10")
    resumed = train(load_run_config(str(run), ["resume=true", "rollout.async.restarts=1"]))  # as `rlvr train RUN --resume` does, here
    assert resumed.status == "completed"
    assert [r["step"] for r in _rows(run)] == [1, 2, 3, 4]
    assert sum(r.get("async/worker_restarts", 0) for r in _rows(run)[last:]) == 1


def test_a_worker_that_would_die_after_the_last_batch_leaves_a_completed_run(sft_base, tmp_path, rl_overrides):
    """The worker is set to die at its fifth generate call (one a batch here) of a 4-step run at k = 2
    with no restart: no step trains a fifth batch, so none is generated, and the run completes with
    its final model (it used to generate k batches more for the last checkpoint, and fail there)."""
    out = _cli("train", "quickstart", *rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=2", "rollout.async.restarts=0", *ARGS),
               RLVR_WORKER_KILL_AT="generate_call:5")
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "run"
    assert json.loads((run / "run_state.json").read_text())["status"] == "completed" and (run / "final").is_dir()
    assert [r["step"] for r in _rows(run)] == [1, 2, 3, 4] and "died" not in out.stdout + out.stderr


def test_a_stuck_worker_is_named_and_the_checkpoint_waiting_for_it_keeps_its_step(sft_base, tmp_path, rl_overrides):
    """With a checkpoint every step (k = 1) the checkpoint after step s waits for batch s + 1: the
    worker hangs in it; the stall names the checkpoint and the worker, the checkpoint is written with
    the batches finished, and a resume (a new worker) ends the run. The timeout is many times what
    a round takes on a loaded machine (a fraction of a second here), so only the hang outlasts it."""
    timeout = 6
    out = _cli("train", "quickstart", *rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=1", f"rollout.async.timeout_s={timeout}",
                                                    *ARGS), RLVR_WORKER_STALL_AT="generate:60")
    assert out.returncode == 1, out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "rollout.async.timeout_s" in errors[0], out.stderr[-2000:]
    assert "the generation worker (pid" in errors[0] and "is stuck: generating round" in errors[0]
    run = tmp_path / "run"
    steps = len(_rows(run))
    assert f"the checkpoint after step {steps} waited {timeout} s (rollout.async.timeout_s) for batch {steps + 1}" in errors[0]
    assert f"step {steps} is saved" in errors[0] and (run / "checkpoints" / f"step-{steps}").is_dir()  # the step just trained is kept
    assert train(load_run_config(str(run), ["resume=true"])).status == "completed"  # as `rlvr train RUN --resume` does, in this process
    assert [r["step"] for r in _rows(run)] == [1, 2, 3, 4]


def test_a_stuck_trainer_is_named_by_the_waiting_worker(sft_base, tmp_path, rl_overrides):
    """The trainer hangs in its second optimizer step: the generation side, waiting for that
    version, says after the timeout which side is stuck (the run itself cannot say it: it hangs).
    On a loaded machine a slow first step may outlast the timeout as well and be named (version 1):
    the test waits for the warning about version 2, which only the hang can cause. The timeout is
    many times what a round takes on a loaded machine (a fraction of a second here)."""
    argv = ["train", "quickstart", *rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=1", "rollout.async.timeout_s=6", *ARGS)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_KILL_AT", "RLVR_WORKER_"))}
    proc = ForkedCLI(argv, {**env, "OMP_NUM_THREADS": "1", "RLVR_STALL_AT": "optimizer_step:2"}, stderr="stdout", cwd=REPO)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None and not any(_stuck_at_version_2(line) for line in lines):
            time.sleep(0.2)
    finally:
        proc.kill()  # it hangs by design
        proc.wait()
    warning = [line for line in lines if _stuck_at_version_2(line)]
    assert warning, "".join(lines)[-2000:]
    assert "waited" in warning[0] and "rollout.async.timeout_s=6" in warning[0]
    assert "stuck in step 2" in warning[0]


def _stuck_at_version_2(line: str) -> bool:
    return "the trainer is stuck" in line and "for the weights of version 2 " in line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_whole_process_group_checkpoints_and_leaves_the_worker_alone(sft_base, tmp_path, rl_overrides, sig):
    """Ctrl-C in a terminal, ``timeout`` and SLURM signal every process of the group: the trainer
    finishes its step, checkpoints and stops the worker itself; the worker neither dies of the
    signal (no restart, no 'worker died') nor prints a traceback."""
    run = tmp_path / "run"
    argv = rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=1", "rollout.async.restarts=1", "update.steps=40",
                        "log.checkpoint_every=1", "rollout.hf.decode=kv", *SMALL)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_KILL_AT", "RLVR_WORKER_", "RLVR_STALL_AT"))}
    proc = ForkedCLI(["train", "quickstart", *argv], {**environ, "OMP_NUM_THREADS": "1"}, stderr="stdout", cwd=REPO, new_session=True)
    try:
        while len(_rows(run)) < 1 and proc.poll() is None:  # a step logged: the worker is generating ahead
            time.sleep(0.1)
        assert proc.poll() is None, proc.stdout.read()
        os.killpg(proc.pid, sig)
        said, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 1 and "interrupted:" in said, said[-3000:]  # an interrupted run exits 1, as a synchronous one does
    assert f"{sig.name}: stopping after this step" in said and "Traceback" not in said and "died" not in said, said[-3000:]
    assert f"\n\n{sig.name}: stopping" not in said, said[-3000:]  # into a log (no terminal): no blank line before it
    assert "starting it again" not in said and "KeyboardInterrupt" not in said, said[-3000:]
    state = json.loads((run / "run_state.json").read_text())
    steps = len(_rows(run))
    assert state["status"] == "interrupted" and 1 <= steps < 40, state
    assert (run / "checkpoints" / f"step-{steps}").is_dir() and not list((run / "checkpoints").glob("*.tmp"))


def test_a_terminal_that_hangs_up_stops_the_run_with_a_checkpoint(sft_base, tmp_path, rl_overrides):
    """An ssh connection that drops hangs up the run's terminal: the kernel sends SIGHUP to the terminal's process
    group and every later write there fails. The trainer finishes its step, saves a checkpoint (here the only one:
    no periodic checkpoints) and stops, as on SIGTERM; the worker and the verifiers ignore the hangup. (A GPU's
    decoder, named on a CPU, makes the worker warn before the hangup: its warning is one line, as the trainer's.)"""
    run = tmp_path / "run"
    argv = rl_overrides(tmp_path, sft_base, "rollout.async.max_staleness=1", "update.steps=40", "log.checkpoint_every=0",
                        "rollout.hf.decode=cuda_graph", "verify.kind=process", *SMALL)
    controller, terminal = os.openpty()

    def take_the_terminal():  # a session whose controlling terminal is the pty, as a job of a login shell has one
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # not ignored, as under a test session started with nohup (the run would ignore it too)

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_KILL_AT", "RLVR_WORKER_", "RLVR_STALL_AT"))}
    proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "train", "quickstart", *argv], stdin=terminal, stdout=terminal,
                            stderr=terminal, cwd=REPO, env={**environ, "OMP_NUM_THREADS": "1"}, preexec_fn=take_the_terminal)
    os.close(terminal)
    said = b""
    try:
        while len(_rows(run)) < 1 and proc.poll() is None:  # a step logged: the worker is generating ahead
            if select.select([controller], [], [], 0.1)[0]:
                said += os.read(controller, 65536)  # (read, so the run never waits on a full terminal)
        assert proc.poll() is None, said.decode(errors="replace")[-3000:]
        lines = said.decode(errors="replace").splitlines()
        if not torch.cuda.is_available():  # (where CUDA runs, so does the decoder, and nothing is warned)
            warned = [line for line in lines if line.startswith("warning: rollout.hf.decode=cuda_graph cannot run here")]
            assert len(warned) == 1, lines  # the worker's: the trainer does not generate
        assert not [line for line in lines if "Warning" in line or line.startswith(" ")], lines  # nothing in Python's own format
    finally:
        os.close(controller)  # the hangup
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGHUP)  # and the shell's, to its jobs: a repeated hangup, not a second signal
    try:
        code = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    state = json.loads((run / "run_state.json").read_text())
    steps = len(_rows(run))
    assert code == 1 and state["status"] == "interrupted" and 1 <= steps < 40, (code, state)
    assert (run / "checkpoints" / f"step-{steps}").is_dir() and not list((run / "checkpoints").glob("*.tmp"))
    assert all(r.get("verify/errors", 0) == 0 for r in _rows(run)), _rows(run)  # no verifier process died of it


def test_a_resume_that_switches_to_synchronous_names_both_settings(sft_base, tmp_path, rl_overrides):
    from rlvr import UserError

    args = rl_overrides(tmp_path, sft_base, "update.steps=2", "log.checkpoint_every=1", "rollout.async.max_staleness=2", *SMALL)
    assert train(load_config(TrainConfig, "quickstart", args)).status == "completed"
    with pytest.raises(UserError) as e:
        train(load_config(TrainConfig, "quickstart", [*args, "resume=true", "update.steps=3", "rollout.async.max_staleness=0"]))
    assert "rollout.async.max_staleness=2, not 0" in str(e.value) and "\n" not in str(e.value), e.value
