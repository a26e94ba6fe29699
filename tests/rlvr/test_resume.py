"""Resume equivalence: N steps straight, and N/2 steps + a stop + resume + N/2 steps, end with the
same parameters — of the policy and of every learned component (critic, PRM) and optimizer, for
policy-gradient (full and LoRA) and preference (offline DPO, online KTO) presets —
with fixed threads and seeds. Also the run-folder rules a resume relies on.

The stop is a real SIGKILL of a real run for GRPO with overlap and for SFT (and at every fault point
for plain GRPO: test_fault_injection.py). For the other presets the point is what their checkpoint
restores, not the kill, so the stopped run is the straight run's own folder as a kill after step 3
leaves it (`_stopped_after`): its config, its step-2 checkpoint, its first 3 metrics rows. The run
is deterministic, so that checkpoint is the one a killed run would have written, and no process
is started to kill it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr import UserError
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train import TrainConfig, train
from rlvr.train.recipes import load_run_config
from tests.forked import ForkedCLI

REPO = Path(__file__).resolve().parents[2]
SMALL = ("update.steps=4", "log.checkpoint_every=2", "rollout.prompts_per_step=8", "rollout.group_size=4", "rollout.chunk_prompts=8",
         "eval.every=0", "eval.at_start=false", "log.tensorboard=false", "log.plot=false")


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _start(*argv: str) -> ForkedCLI:
    """``rlvr ARGV...`` in a process of its own, to be killed (forked without a new interpreter's imports: `tests.forked`)."""
    return ForkedCLI(list(argv), {**os.environ, "OMP_NUM_THREADS": "1"}, stderr="stdout", cwd=REPO)


def _here(*argv: str) -> str:
    """``rlvr ARGV`` by the CLI's `main` in this process (only a killed run needs a process of its own:
    no imports paid again); its console."""
    console = io.StringIO()
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        code = main(list(argv))
    assert code == 0, console.getvalue()[-3000:]
    return console.getvalue()


def _kill_after(run: Path, rows: int, proc: ForkedCLI, timeout: float = 600) -> None:
    """SIGKILL ``proc`` once ``rows`` steps are logged (so the checkpoint before them is on disk)."""
    deadline = time.monotonic() + timeout
    while len(_rows(run)) < rows:
        if proc.poll() is not None:
            raise AssertionError(f"training exited early: {proc.stdout.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("training made no progress")
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert proc.returncode == -9


def _stopped_after(straight: Path, run: Path, step: int, logged: int) -> Path:
    """``run``: ``straight``'s run folder as a kill after ``logged`` logged steps leaves it, its last
    checkpoint ``step``'s: the config, that checkpoint, the cached reference log-probs (written at
    the start), and the first ``logged`` metrics rows."""
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(straight / "checkpoints" / f"step-{step}", run / "checkpoints" / f"step-{step}")
    for name in ("config.yaml", "reference_logps.pt"):
        if (straight / name).exists():
            shutil.copy2(straight / name, run / name)
    rows = (straight / "metrics.jsonl").read_text().splitlines(keepends=True)
    (run / "metrics.jsonl").write_text("".join(rows[:logged]))
    return run


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(folder.rglob("*.safetensors")):
        out |= {f"{f.relative_to(folder)}:{k}": v for k, v in load_file(f).items()}
    for f in sorted(folder.rglob("optimizer.pt")):
        state = torch.load(f, weights_only=False)["optimizer"]["state"]
        out |= {f"{f.relative_to(folder)}:{i}:{k}": v for i, s in state.items() for k, v in s.items() if torch.is_tensor(v)}
    return out


KILLED = {"grpo+overlap"}  # the presets whose stopped run is a real process, SIGKILLed after its step 3 (the module's docstring)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["grpo+overlap", "grpo+lora", "ppo", "prime", "dpo", "kto"])
def test_killed_and_resumed_run_ends_with_the_same_parameters(preset, sft_base, tmp_path, rl_overrides, request):
    # plain synchronous GRPO (the quickstart's) is killed at every fault point and resumed in test_fault_injection.py
    extra = {"dpo": [f"pairs.path={request.getfixturevalue('verified_pairs')}", "pairs.batch_size=8"],
             # the batch generated ahead at the checkpoint is saved with it, and the generation RNG after it
             "grpo+overlap": ["rollout.overlap=true", "log.tensorboard=true"],
             # the checkpoint holds the adapters and their optimizer; the base is loaded again from model.name_or_path
             "grpo+lora": ["model.lora.r=8", "optim.lr=1e-3"]}
    args = [f"algo.preset={preset.split('+')[0]}", *SMALL, *extra.get(preset, [])]
    straight = train(load_run_config("quickstart", rl_overrides(tmp_path / "straight", sft_base, *args)))
    assert straight.status == "completed"

    run = tmp_path / "killed" / "run"
    if preset in KILLED:
        _kill_after(run, 3, _start("train", "quickstart", *rl_overrides(tmp_path / "killed", sft_base, *args)))
    else:
        _stopped_after(straight.run_dir, run, step=2, logged=3)
    out = _here("train", str(run), "--resume")  # only the run directory: its own config.yaml has the rest
    assert f"resumed from {run / 'checkpoints' / 'step-2'}" in out
    if preset == "dpo":  # the reference log-probs come from the run's cache, not from a reference model
        assert "computed in" not in out and (run / "reference_logps.pt").is_file()
    assert [r["step"] for r in _rows(run)] == [1, 2, 3, 4]
    assert (run / "final" / "config.json").is_file() or (run / "final" / "adapter_config.json").is_file()  # the resumed run finished

    a, b = _tensors(straight.run_dir / "checkpoints" / "step-4"), _tensors(run / "checkpoints" / "step-4")
    components = {k.split("/")[0] for k in a}
    assert components == {"policy", "critic"} if preset == "ppo" else components == ({"policy", "prm"} if preset == "prime" else {"policy"})
    assert a.keys() == b.keys()
    if preset == "grpo+lora":
        assert {k.split(":")[0] for k in a if ".safetensors:" in k} == {"policy/adapter_model.safetensors"}
        assert all("lora_" in k for k in a if ".safetensors:" in k)
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, different[:5]
    # the logged curves of the two runs agree step by step as well
    curve = "loss/total" if preset == "dpo" else "reward/mean"
    assert [r[curve] for r in _rows(straight.run_dir)] == [r[curve] for r in _rows(run)]
    # and the data stream continued where the checkpoint left it (the steps redone read the same prompts again)
    positions = [r.get("data/position") for r in _rows(straight.run_dir)]
    assert positions == [r.get("data/position") for r in _rows(run)]
    assert None not in positions, positions  # every preset logs where its stream stands (DPO's of pairs)
    # and the weight-sync probe goes on after the resume as in the uninterrupted run (with overlap it stopped for good)
    def probe_scores(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if k.startswith(("sync/logprob_gap", "sync/trainer_moved"))} for r in rows]

    probed = probe_scores(_rows(straight.run_dir))
    assert probed == probe_scores(_rows(run))
    if preset == "grpo+overlap":  # the engine decodes from its own copy of the weights (the other presets share the policy's)
        assert all("sync/logprob_gap_max" in r for r in probed[1:]), probed
    if preset == "grpo+overlap":  # TensorBoard drops the killed run's step 3 instead of showing the curve go back in time
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(str(run / "tb"))
        events.Reload()
        scalars = events.Scalars("reward/mean")
        assert [e.step for e in scalars] == [1, 2, 3, 4]
        assert [e.value for e in scalars] == pytest.approx([r["reward/mean"] for r in _rows(run)])


@pytest.mark.slow
def test_sft_resumes_after_sigkill_with_the_same_parameters(tmp_path):
    common = ["steps=6", "log.checkpoint_every=3", "batch_size=16", "micro_batch_size=8", "eval.limit=8", "eval.max_new_tokens=16",
              "threads=1", "log.progress=false", "log.tensorboard=false", "log.plot=false"]
    straight = train(load_run_config("sft_quickstart", [f"output_dir={tmp_path / 'a'}", "name=run", *common]))
    run = tmp_path / "b" / "run"
    _kill_after(run, 4, _start("sft", "sft_quickstart", f"output_dir={tmp_path / 'b'}", "name=run", *common))
    _here("sft", str(run), "--resume")
    a, b = _tensors(straight.run_dir / "checkpoints" / "step-6"), _tensors(run / "checkpoints" / "step-6")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_existing_run_is_refused_unless_resumed_or_overwritten(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    argv = ["train", "quickstart", f"output_dir={tmp_path}", "name=run", "model.name_or_path=/nonexistent/model"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a run (metrics.jsonl)" in err and "resume=true" in err and "overwrite=true" in err
    assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'  # nothing was touched
    assert main([*argv, "overwrite=true"]) == 2  # the run folder is cleared, then the missing model is reported
    assert "not found" in capsys.readouterr().err and not (run / "metrics.jsonl").exists()


def test_resume_reads_the_runs_own_config(tmp_path):
    run = tmp_path / "x"
    run.mkdir()
    saved = load_config(TrainConfig, "quickstart", [f"output_dir={tmp_path}", "name=x", "model.name_or_path=/some/base", "algo.preset=dapo"])
    from rlvr.config import dump_yaml

    dump_yaml(saved, run / "config.yaml")
    cfg = load_run_config("quickstart", [f"output_dir={tmp_path}", "name=x", "resume=true", "update.steps=50"])
    assert (cfg.model.name_or_path, cfg.algo.preset, cfg.update.steps, cfg.resume) == ("/some/base", "dapo", 50, True)
    from_dir = load_run_config(str(run), ["resume=true"])
    assert (from_dir.model.name_or_path, from_dir.run_dir, from_dir.resume) == ("/some/base", run, True)


@pytest.mark.slow
def test_a_resume_whose_checkpoint_lacks_a_component_is_refused_before_training(sft_base, tmp_path, rl_overrides):
    args = rl_overrides(tmp_path, sft_base, "update.steps=1", "rollout.prompts_per_step=2", "rollout.group_size=2", *SMALL[4:])
    train(load_config(TrainConfig, "quickstart", args))
    with pytest.raises(UserError, match=r"has no 'critic' \(it holds: policy\), but this config needs one"):
        train(load_config(TrainConfig, "quickstart", [*args, "resume=true", "update.steps=2", "algo.preset=ppo"]))
