"""SIGKILL at chosen points of a run (`envs.faults`: during generation, verification, the optimizer
step and the checkpoint write), over several seeds: every time, `rlvr train RUN --resume`
continues and ends with the same parameters, optimizer state and logged curve as an uninterrupted
run (issue 22)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from envs.faults import POINTS
from tests.rlvr.test_resume import _rows, _tensors

REPO = Path(__file__).resolve().parents[2]
STEPS = 4
ARGS = (f"update.steps={STEPS}", "log.checkpoint_every=1", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.chunk_prompts=4",
        "rollout.max_new_tokens=24", "eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.plot=false")
KILLS = 6  # every point once, then points drawn by seed


def _rlvr(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RLVR_KILL_AT", "RLVR_FAULT_COUNTS")}
    return subprocess.run([sys.executable, "-m", "rlvr.cli", *argv], cwd=REPO, env={**environ, "OMP_NUM_THREADS": "1", **env},
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_sigkill_at_any_point_then_resume_ends_as_an_uninterrupted_run(sft_base, tmp_path, rl_overrides):
    counts_file = tmp_path / "counts.json"
    straight = _rlvr("train", "quickstart", *rl_overrides(tmp_path / "straight", sft_base, *ARGS), RLVR_FAULT_COUNTS=str(counts_file))
    assert straight.returncode == 0, straight.stderr[-2000:]
    counts = json.loads(counts_file.read_text())
    assert all(counts.get(p, 0) >= 1 for p in POINTS), counts
    reference = _tensors(tmp_path / "straight" / "run" / "checkpoints" / f"step-{STEPS}")
    curve = [r["reward/mean"] for r in _rows(tmp_path / "straight" / "run")]
    assert any(r > 0 for r in curve)  # rewards reached the policy: equal parameters are not trivially equal

    survived = []
    for seed in range(KILLS):
        rng = random.Random(seed)
        point = POINTS[seed] if seed < len(POINTS) else rng.choice(POINTS)
        nth = rng.randint(1, counts[point])
        out = tmp_path / f"killed-{seed}"
        killed = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *ARGS), RLVR_KILL_AT=f"{point}:{nth}")
        assert killed.returncode == -9, f"{point}:{nth} was not reached: {killed.stderr[-1000:]}"
        resumed = _rlvr("train", str(out / "run"), "--resume")
        assert resumed.returncode == 0, f"{point}:{nth}: {resumed.stderr[-2000:]}"
        run = out / "run"
        assert [r["step"] for r in _rows(run)] == list(range(1, STEPS + 1)), point
        assert [r["reward/mean"] for r in _rows(run)] == curve, point
        after = _tensors(run / "checkpoints" / f"step-{STEPS}")
        assert after.keys() == reference.keys()
        different = [k for k in reference if not torch.equal(reference[k], after[k])]
        assert not different, f"{point}:{nth}: {different[:5]}"
        assert not list((run / "checkpoints").glob("*.tmp"))
        survived.append(f"{point}:{nth}")
    assert len(survived) == KILLS, survived


@pytest.mark.slow
@pytest.mark.parametrize("point", ["optimizer_step", "generate"])
def test_running_out_of_gpu_memory_names_the_settings_to_lower_and_keeps_the_checkpoint(sft_base, tmp_path, rl_overrides, point):
    """CUDA's out-of-memory error in training or in generation (injected, `envs.faults`): the run
    stops with one line naming the settings to lower, the last checkpoint is kept, and --resume
    continues."""
    out = tmp_path / "oom"
    counts_file = tmp_path / "counts.json"
    first = _rlvr("train", "quickstart", *rl_overrides(tmp_path / "count", sft_base, *ARGS), RLVR_FAULT_COUNTS=str(counts_file))
    assert first.returncode == 0, first.stderr[-2000:]
    nth = json.loads(counts_file.read_text())[point]  # the last time the run reaches it: after a checkpoint
    stopped = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *ARGS), RLVR_OOM_AT=f"{point}:{nth}")
    assert stopped.returncode == 1, stopped.stderr[-2000:]
    error = [line for line in stopped.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "CUDA ran out of memory: lower update.micro_batch_size" in error[0], stopped.stderr[-2000:]
    failed_step = int(error[0].split("step ", 1)[1].split(":", 1)[0])
    assert failed_step > 1 and (out / "run" / "checkpoints" / f"step-{failed_step - 1}").is_dir()
    assert json.loads((out / "run" / "run_state.json").read_text())["status"].startswith("failed: CUDA ran out of memory")
    resumed = _rlvr("train", str(out / "run"), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [r["step"] for r in _rows(out / "run")] == list(range(1, STEPS + 1))


@pytest.mark.slow
def test_sigkill_with_samples_in_flight_then_resume_ends_as_an_uninterrupted_run(sft_base, tmp_path, rl_overrides):
    """Asynchronous generation (rollout.async.max_staleness=2): the trainer is SIGKILLed while
    finished batches wait in the queue behind the one it takes (``queued``: after a checkpoint the
    worker is two batches ahead, so every step from the second reaches it), or while it writes a
    checkpoint of them; its worker dies with it. `--resume` puts the checkpointed batches
    back in the queue and starts a new worker after them: the run ends with the uninterrupted run's
    parameters, optimizer state and curve."""
    args = (*ARGS, "rollout.async.max_staleness=2", "rollout.hf.decode=kv")
    counts_file = tmp_path / "counts.json"
    straight = _rlvr("train", "quickstart", *rl_overrides(tmp_path / "straight", sft_base, *args), RLVR_FAULT_COUNTS=str(counts_file))
    assert straight.returncode == 0, straight.stderr[-2000:]
    counts = json.loads(counts_file.read_text())
    # from the second step on a checkpoint left a batch behind the one taken, but none behind the last (no batch past it is generated)
    assert counts.get("queued") == STEPS - 2, counts
    reference = _tensors(tmp_path / "straight" / "run" / "checkpoints" / f"step-{STEPS}")
    curve = [r["reward/mean"] for r in _rows(tmp_path / "straight" / "run")]
    for kill in ("queued:1", f"queued:{STEPS - 2}", "checkpoint_write:2"):
        out = tmp_path / f"killed-{kill.replace(':', '-')}"
        killed = _rlvr("train", "quickstart", *rl_overrides(out, sft_base, *args), RLVR_KILL_AT=kill)
        assert killed.returncode == -9, f"{kill} was not reached: {killed.stderr[-1000:]}"
        resumed = _rlvr("train", str(out / "run"), "--resume")
        assert resumed.returncode == 0, f"{kill}: {resumed.stderr[-2000:]}"
        run = out / "run"
        assert [r["step"] for r in _rows(run)] == list(range(1, STEPS + 1)), kill
        assert [r["reward/mean"] for r in _rows(run)] == curve, kill
        # every trained version proven, the restored batches' too (their probe scores travel in the checkpoint)
        assert all("sync/logprob_gap_mean" in r and r["sync/logprob_gap_mean"] < 1e-5 for r in _rows(run)), kill
        after = _tensors(run / "checkpoints" / f"step-{STEPS}")
        assert after.keys() == reference.keys()
        assert not [k for k in reference if not torch.equal(reference[k], after[k])], kill
