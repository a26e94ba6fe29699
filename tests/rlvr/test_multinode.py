"""Multi-node training proven on one machine: two torchrun "nodes" (``--nnodes 2``, c10d rendezvous
on 127.0.0.1, one gloo process each) train the embedded model with FSDP2 like one process does,
write each checkpoint file once, log once; their checkpoints resume with 1 or 2 processes (the
optimizer state resharded by torch.distributed.checkpoint) and continue the uninterrupted run; a
node that dies stops the run naming its rank, and the survivors resume.

SFT is the recipe here because its batches do not depend on the process count (no sampling), so a
continued run can be compared with the uninterrupted one weight by weight."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.train.checkpoint import list_checkpoints
from tests.rlvr.nodes import LocalNodes, one_process_env

pytestmark = pytest.mark.slow

GLOBAL_BATCH = 8  # sequences per optimizer step, whatever the process count (batch_size is per process)
SFT = ("sft_quickstart", "steps=4", f"micro_batch_size={GLOBAL_BATCH}", "optim.warmup_steps=0", "distributed=fsdp",
       "log.checkpoint_every=2", "log.keep_checkpoints=3", "eval.every=0", "eval.limit=4", "eval.max_new_tokens=16",
       "log.progress=false", "log.tensorboard=false", "log.plot=false", "threads=1")
TIMEOUT_S = 600
ATOL = 1e-5  # the FSDP-against-DDP equality test's tolerance (test_training_algos.py)


def sft_args(out: Path, name: str, processes: int, *extra: str) -> list[str]:
    return ["sft", *SFT, f"output_dir={out}", f"name={name}", f"batch_size={GLOBAL_BATCH // processes}", *extra]


def run_one_process(args: list[str]) -> str:
    """``rlvr ARGS`` in this process (one process needs no launcher, and no imports paid again); its console."""
    code, said = cli(args)
    assert code == 0, said[-5000:]
    return said


def cli(args: list[str]) -> tuple[int, str]:
    console = io.StringIO()
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        code = main(args)
    return code, console.getvalue()


def run_two_nodes(log_dir: Path, args: list[str], module: str = "rlvr.cli", **env: str) -> list[str]:
    with LocalNodes(log_dir, module, *args, env=one_process_env(**env)) as nodes:
        codes = nodes.wait(TIMEOUT_S)
        outputs = [nodes.output(i) for i in range(2)]
    assert codes == [0, 0], "\n".join(o[-3000:] for o in outputs)
    return outputs


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def train_rows(run: Path) -> list[dict]:
    return [r for r in metrics(run) if "sft/loss" in r]


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "final" / "model.safetensors")


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def seeded_with(source: Path, run: Path, step: int) -> Path:
    """A run directory holding only ``source``'s checkpoint of ``step``: the run as if stopped there."""
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(source / "checkpoints" / f"step-{step}", run / "checkpoints" / f"step-{step}")
    return run


def test_two_localhost_nodes_train_like_one_process_and_resume_with_either_count(tmp_path):
    out = tmp_path / "runs"
    audit = tmp_path / "writes"
    audit.mkdir()
    outputs = run_two_nodes(tmp_path / "logs-two", sft_args(out, "two", 2), module="tests.rlvr.audited_cli",
                            RLVR_WRITE_AUDIT_ROOT=str(out), RLVR_WRITE_AUDIT_DIR=str(audit))
    two = out / "two"
    # logs and metrics once: one summary line, one metrics row per step
    assert sum(o.count("completed: 4 steps") for o in outputs) == 1
    assert [r["step"] for r in train_rows(two)] == [1, 2, 3, 4]
    # a checkpoint holds one file per process's shard and one copy of everything else
    step2 = two / "checkpoints" / "step-2"
    files = sorted(str(p.relative_to(step2)) for p in step2.rglob("*") if p.is_file())
    assert [f for f in files if "optimizer_shards" in f or f.startswith("rng-")] == [
        "policy/optimizer_shards/.metadata", "policy/optimizer_shards/__0_0.distcp", "policy/optimizer_shards/__1_0.distcp",
        "rng-0.pt", "rng-1.pt"]
    written = {rank: set((audit / f"rank-{rank}.txt").read_text().split()) for rank in (0, 1)}
    assert str((step2.with_name("step-2.tmp") / "policy" / "optimizer_shards" / "__1_0.distcp").resolve()) in written[1]
    assert written[0] & written[1] == set(), "two processes wrote the same file"
    # the same config in one process (the same global batch): the same losses and, but for float
    # rounding that Adam's first step divides by the gradient's own size, the same weights
    one = out / "one"
    run_one_process(sft_args(out, "one", 1))
    assert [r["sft/loss"] for r in train_rows(one)] == pytest.approx([r["sft/loss"] for r in train_rows(two)], rel=1e-5)
    assert [r["optim/lr"] for r in train_rows(one)] == pytest.approx([r["optim/lr"] for r in train_rows(two)], rel=1e-9)
    assert max_difference(final_weights(one), final_weights(two)) < 1e-4  # measured 1.2e-5; a wrong schedule or batch: ~4e-3
    # resume a 2-process checkpoint with 1 and with 2 processes, a 1-process one with 2: each
    # continues its uninterrupted run
    seeded_with(two, out / "two_to_one", 2)
    said = run_one_process(sft_args(out, "two_to_one", 1, "resume=true"))
    assert "written by 2 processes, this run has 1: the optimizer state is resharded" in said
    assert "global batch is now 1/2 of what it was" in said
    # an optimizer state that cannot be read at the new count is refused in one line naming both
    seeded_with(two, out / "two_to_ddp", 2)
    code, said = cli(sft_args(out, "two_to_ddp", 1, "distributed=ddp", "resume=true"))
    assert code != 0 and not (out / "two_to_ddp" / "final").exists()
    assert "error: " in said and "was written by 2 processes, this run has 1: its policy optimizer state is sharded (distributed=fsdp)" in said
    seeded_with(one, out / "one_to_two", 2)
    said = "".join(run_two_nodes(tmp_path / "logs-one-to-two", sft_args(out, "one_to_two", 2, "resume=true")))
    assert "written by 1 process, this run has 2: the optimizer state is resharded" in said
    # (a 2-process checkpoint resumed by 2 processes continues exactly: test_async_ranks.py's first test)
    for continued, uninterrupted in (("two_to_one", two), ("one_to_two", one)):
        assert [r["step"] for r in train_rows(out / continued)] == [3, 4]
        assert max_difference(final_weights(out / continued), final_weights(uninterrupted)) <= ATOL, continued


def test_a_lost_node_stops_the_run_naming_its_rank_and_the_survivors_resume(tmp_path):
    out = tmp_path / "runs"
    run = out / "run"
    with LocalNodes(tmp_path / "logs", "rlvr.cli", *sft_args(out, "run", 2, "steps=1000", "log.keep_checkpoints=2")) as nodes:
        nodes.wait_for(lambda: bool(list_checkpoints(run / "checkpoints")), timeout=TIMEOUT_S)
        lost = nodes.node_of_rank()[1]
        nodes.kill(lost)
        survivor = 1 - lost
        code = nodes.procs[survivor].wait(timeout=TIMEOUT_S)
        said = nodes.output(survivor)
    assert code != 0
    assert "process 1 of 2 stopped answering (process 0 saw:" in said, said[-3000:]
    state = json.loads((run / "run_state.json").read_text())
    assert state["status"].startswith("failed: after step") and "process 1 of 2 stopped answering" in state["status"]
    kept = list_checkpoints(run / "checkpoints")
    assert kept and f"the last checkpoint, step-{kept[-1][0]}, is kept" in said
    assert not list((run / "checkpoints").glob("*.tmp"))
    # the surviving node alone continues the run from that checkpoint
    last = kept[-1][0]
    said = run_one_process(sft_args(out, "run", 1, f"steps={last + 2}", "resume=true"))
    assert f"resumed from {kept[-1][1]}" in said and f"completed: {last + 2} steps" in said
    assert [r["step"] for r in train_rows(run)][-2:] == [last + 1, last + 2]


def test_two_localhost_nodes_train_the_policy_and_one_process_continues(sft_base, tmp_path, rl_overrides):
    """The quickstart's GRPO with FSDP2 on two nodes, continued from its first checkpoint by one
    process with the same prompts a step. Each process samples with its own generator, so at another
    process count the samples (and the weights) differ: this checks that the run continues, from the
    same place in the prompt stream, not that it is equal."""
    out = tmp_path / "runs"
    args = rl_overrides(out, sft_base, "distributed=fsdp", "update.steps=2", "log.checkpoint_every=1", "rollout.group_size=4",
                        "rollout.chunk_prompts=4", "optim.warmup_steps=0", "eval.every=0", "eval.at_start=false", "eval.limit=4",
                        "log.tensorboard=false", "log.plot=false")
    outputs = run_two_nodes(tmp_path / "logs", ["train", "quickstart", *args, "rollout.prompts_per_step=4"])
    assert sum(o.count("completed: 2 steps") for o in outputs) == 1
    two = [r for r in metrics(out / "run") if "reward/mean" in r]
    assert [r["step"] for r in two] == [1, 2]
    shards = out / "run" / "checkpoints" / "step-1" / "policy" / "optimizer_shards"
    assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    seeded_with(out / "run", out / "one", 1)
    said = run_one_process(["train", "quickstart", *args, "name=one", "rollout.prompts_per_step=8", "resume=true"])
    assert "written by 2 processes, this run has 1: the optimizer state is resharded" in said and "completed: 2 steps" in said
    one = [r for r in metrics(out / "one") if "reward/mean" in r]
    assert [r["step"] for r in one] == [2]
    assert one[0]["data/position"] == two[1]["data/position"] == 16  # 2 steps x 8 prompts, read by 2 processes or 1
