"""SIGKILL at chosen points of a run (`envs.faults`: during generation, verification, the optimizer
step and the checkpoint write), each point once at a seed-drawn moment: every time, `rlvr train RUN
--resume` continues and ends with the same parameters, optimizer state and logged curve as an
uninterrupted run (issue 22). The uninterrupted run, which also counts how often each point is
reached, is run once for the module."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
import torch

from envs import faults
from envs.faults import POINTS
from rlvr.train.recipes import load_run_config, train
from tests.forked import run_forked
from tests.rlvr.test_resume import _rows, _tensors

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
ARGS = (f"update.steps={STEPS}", "log.checkpoint_every=1", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4",
        "rollout.max_new_tokens=24", "eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.plot=false")


def _rlvr(*argv: str, **env: str) -> subprocess.CompletedProcess:
    """``rlvr ARGV`` in a process of its own (it kills itself, or fails, at the fault point), forked
    without a new interpreter's imports (`tests.forked`)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("RLVR_KILL_AT", "RLVR_FAULT_COUNTS")}
    return run_forked(list(argv), {**environ, "OMP_NUM_THREADS": "1", **env}, timeout=900, cwd=REPO)


def _resume(run: Path) -> None:
    """`rlvr train RUN --resume` in this process, as the CLI runs it (no imports paid again: only the
    killed runs need processes of their own; the CLI's --resume itself is test_resume.py's)."""
    assert train(load_run_config(str(run), ["resume=true"])).status == "completed"


def _straight(out: Path, sft_base: Path, *args: str) -> tuple[Path, dict[str, int]]:
    """The uninterrupted run of ``args`` in this process (only the killed runs need processes of their own):
    its run folder and how often it reached each fault point."""
    with faults.counting() as counts:
        assert train(load_run_config("quickstart", [f"output_dir={out}", "name=run", f"model.name_or_path={sft_base}", "log.progress=false",
                                                    "threads=1", *args])).status == "completed"
    return out / "run", dict(counts)


@pytest.fixture(scope="module")
def straight(sft_base, tmp_path_factory) -> tuple[Path, dict[str, int]]:
    """The uninterrupted run of ARGS (its run folder) and how often it reached each fault point."""
    return _straight(tmp_path_factory.mktemp("straight"), sft_base, *ARGS)


@pytest.mark.slow
def test_sigkill_at_any_point_then_resume_ends_as_an_uninterrupted_run(sft_base, tmp_path, rl_overrides, straight):
    straight_run, counts = straight
    assert all(counts.get(p, 0) >= 1 for p in POINTS), counts
    reference = _tensors(straight_run / "checkpoints" / f"step-{STEPS}")
    curve = [r["reward/mean"] for r in _rows(straight_run)]
    assert any(r > 0 for r in curve)  # rewards reached the policy: equal parameters are not trivially equal

    survived = []
    for seed, point in enumerate(POINTS):  # every point once, at a moment drawn by seed
        nth = random.Random(seed).randint(1, counts[point])
        out = tmp_path / f"killed-{seed}"
        killed = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *ARGS), RLVR_KILL_AT=f"{point}:{nth}")
        assert killed.returncode == -9, f"{point}:{nth} was not reached: {killed.stderr[-1000:]}"
        _resume(out / "run")
        run = out / "run"
        assert [r["step"] for r in _rows(run)] == list(range(1, STEPS + 1)), point
        assert [r["reward/mean"] for r in _rows(run)] == curve, point
        after = _tensors(run / "checkpoints" / f"step-{STEPS}")
        assert after.keys() == reference.keys()
        different = [k for k in reference if not torch.equal(reference[k], after[k])]
        assert not different, f"{point}:{nth}: {different[:5]}"
        assert not list((run / "checkpoints").glob("*.tmp"))
        survived.append(f"{point}:{nth}")
    assert len(survived) == len(POINTS), survived


@pytest.mark.slow
@pytest.mark.parametrize("point", ["optimizer_step", "generate"])
def test_running_out_of_gpu_memory_names_the_settings_to_lower_and_keeps_the_checkpoint(sft_base, tmp_path, rl_overrides, straight, point):
    """CUDA's out-of-memory error in training or in generation (injected, `envs.faults`): the run
    stops with one line naming the settings to lower, the last checkpoint is kept, and --resume
    continues."""
    out = tmp_path / "oom"
    nth = straight[1][point]  # the last time the run reaches it: after a checkpoint
    stopped = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *ARGS), RLVR_OOM_AT=f"{point}:{nth}")
    assert stopped.returncode == 1, stopped.stderr[-2000:]
    error = [line for line in stopped.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "CUDA ran out of memory: lower update.micro_batch_size" in error[0], stopped.stderr[-2000:]
    failed_step = int(error[0].split("step ", 1)[1].split(":", 1)[0])
    assert failed_step > 1 and (out / "run" / "checkpoints" / f"step-{failed_step - 1}").is_dir()
    assert json.loads((out / "run" / "run_state.json").read_text())["status"].startswith("failed: CUDA ran out of memory")
    _resume(out / "run")
    assert [r["step"] for r in _rows(out / "run")] == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_sigkill_with_samples_in_flight_then_resume_ends_as_an_uninterrupted_run(sft_base, tmp_path, rl_overrides):
    """Asynchronous generation (rollout.async.max_staleness=2): the trainer is SIGKILLed while
    finished batches wait in the queue behind the one it takes (``queued``: after a checkpoint the
    worker is two batches ahead, so every step from the second but the last reaches it: in this
    3-step run, step 2 only), or while it writes a checkpoint of them; its worker dies with it.
    `--resume` puts the checkpointed batches back in the queue and starts a new worker after them:
    the run ends with the uninterrupted run's parameters, optimizer state and curve."""
    steps = 3
    args = (*(a for a in ARGS if not a.startswith("update.steps=")), f"update.steps={steps}", "rollout.async.max_staleness=2",
            "rollout.hf.decode=kv")
    straight_run, counts = _straight(tmp_path / "straight", sft_base, *args)
    # from the second step on a checkpoint left a batch behind the one taken, but none behind the last (no batch past it is generated)
    assert counts.get("queued") == steps - 2, counts
    reference = _tensors(straight_run / "checkpoints" / f"step-{steps}")
    curve = [r["reward/mean"] for r in _rows(straight_run)]
    for kill in ("queued:1", "checkpoint_write:2"):
        out = tmp_path / f"killed-{kill.replace(':', '-')}"
        killed = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *args), RLVR_KILL_AT=kill)
        assert killed.returncode == -9, f"{kill} was not reached: {killed.stderr[-1000:]}"
        _resume(out / "run")
        run = out / "run"
        assert [r["step"] for r in _rows(run)] == list(range(1, steps + 1)), kill
        assert [r["reward/mean"] for r in _rows(run)] == curve, kill
        # every trained version proven, the restored batches' too (their probe scores travel in the checkpoint)
        assert all("sync/logprob_gap_mean" in r and r["sync/logprob_gap_mean"] < 1e-5 for r in _rows(run)), kill
        after = _tensors(run / "checkpoints" / f"step-{steps}")
        assert after.keys() == reference.keys()
        assert not [k for k in reference if not torch.equal(reference[k], after[k])], kill
