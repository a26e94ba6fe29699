"""Asynchronous training with several training processes (`rlvr.rollout.async_ranks`): rank 0 runs the
producer and sends each global batch to every rank, every rank trains its share and takes part in
gathering the weights each version stages.

End to end (real processes on 127.0.0.1): two FSDP processes (torchrun, gloo) with
``rollout.async.max_staleness=2`` generating on an ``rlvr rollout serve --engine hf`` server train what
one process with the same global batch trains: the same batches (rewards, lengths), every version
proven on the server by the sync probe, and the same weights within the FSDP equality tolerance."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from envs.types import Problem, Verdict
from rlvr import UserError
from rlvr.cli import main
from rlvr.rollout.async_ranks import bounds, share
from rlvr.rollout.config import AsyncConfig, RolloutConfig
from rlvr.rollout.groups import check_async
from rlvr.rollout.sampling import Group, SamplingReport
from tests.cluster.box import Trainers, env_server, metrics
from tests.rlvr.rollout_server import rollout_server

STEPS = 4
ATOL = 1e-4  # as tests/rlvr/test_multinode.py: FSDP across processes against one process (Adam's first step magnifies rounding)


def _report(kept: int, generated: int) -> SamplingReport:
    groups = [Group(Problem(f"p{i}", "q", "a"), [], [Verdict(0.0, False)]) for i in range(generated)]
    return SamplingReport(groups[:kept], groups, kept, kept, False, 1, 0.0, 0.0, weights_version=3)


def test_a_global_batch_is_split_into_contiguous_disjoint_shares_covering_it():
    for n in range(0, 9):
        for world in (1, 2, 3):
            parts = [bounds(n, r, world) for r in range(world)]
            assert parts[0][0] == 0 and parts[-1][1] == n and all(parts[i][1] == parts[i + 1][0] for i in range(world - 1))
            assert max(b - a for a, b in parts) - min(b - a for a, b in parts) <= 1
    report = _report(kept=5, generated=7)
    shares = [share(report, r, 2) for r in range(2)]
    assert [g.problem.id for s in shares for g in s.kept] == [g.problem.id for g in report.kept]
    assert [g.problem.id for s in shares for g in s.generated] == [g.problem.id for g in report.generated]  # each counted once
    assert all(s.weights_version == 3 for s in shares)


def test_several_processes_are_refused_only_for_the_in_process_hf_worker():
    class Task:
        env = object()
        id = "arithmetic-v1"

    with pytest.raises(UserError, match=r"rollout.async.max_staleness=2 with rollout.engine=hf .* with 2 processes generate on rollout servers"):
        check_async(RolloutConfig(engine="hf", async_=AsyncConfig(max_staleness=2)), 2, Task())
    check_async(RolloutConfig(engine="vllm_server", async_=AsyncConfig(max_staleness=2)), 2, Task())
    check_async(RolloutConfig(engine="hf", async_=AsyncConfig(max_staleness=2)), 1, Task())


def _args(out, name, base, url, per_process, *extra):
    return ["quickstart", f"output_dir={out}", f"name={name}", f"model.name_or_path={base}", "threads=1", "device=cpu",
            "distributed=fsdp", "rollout.engine=vllm_server", f"rollout.vllm.server_urls=[{url}]", "rollout.vllm.prompts_per_request=2",
            f"rollout.prompts_per_step={per_process}", "rollout.group_size=4", "rollout.max_new_tokens=32", "rollout.chunk_prompts=4",
            "rollout.async.max_staleness=2", f"update.steps={STEPS}", "update.micro_batch_size=32", "optim.warmup_steps=0", "eval.every=0",
            "eval.at_start=false", "log.checkpoint_every=2", "log.progress=false", "log.tensorboard=false", "log.plot=false", *extra]


def _seeded_with(source, run, step):
    """A run directory holding only ``source``'s checkpoint of ``step``: the run as if stopped there."""
    (run / "checkpoints").mkdir(parents=True)
    shutil.copytree(source / "checkpoints" / f"step-{step}", run / "checkpoints" / f"step-{step}")


def _train(tmp_path, name, processes, *args):
    with Trainers(tmp_path / f"{name}.log", *args, processes=processes, forked=True) as run:
        code = run.wait(900)
        assert code == 0, run.output()[-4000:]
        assert run.output().count(f"completed: {STEPS} steps") == 1  # one summary line: rank 0 logs
        return run.output()


def _train_here(*args):
    """One process: ``rlvr train ARGS`` in this one (no launcher, no imports paid again)."""
    console = io.StringIO()
    with contextlib.redirect_stdout(console), contextlib.redirect_stderr(console):
        code = main(["train", *args])
    assert code == 0 and console.getvalue().count(f"completed: {STEPS} steps") == 1, console.getvalue()[-4000:]


@pytest.fixture(scope="module")
def served(sft_base):
    """One rollout server for the runs that do not kill theirs (each run pushes its own weights before it
    generates: test_two_processes_asynchronous_... runs three on it and compares their batches exactly)."""
    with rollout_server(sft_base, "hf.decode=kv", engine="hf", device="cpu") as url:
        yield url


@pytest.mark.slow
def test_two_processes_asynchronous_train_what_one_process_trains_with_the_same_global_batch_and_resume_exactly(sft_base, served, tmp_path):
    _train_here(*_args(tmp_path, "one", sft_base, served, 8))
    _train(tmp_path, "two", 2, *_args(tmp_path, "two", sft_base, served, 4))
    _seeded_with(tmp_path / "two", tmp_path / "resumed", 2)  # the 2-process run as if stopped after step 2
    said = _train(tmp_path, "resumed", 2, *_args(tmp_path, "resumed", sft_base, served, 4, "resume=true"))
    assert "resumed from" in said
    rows = {name: metrics(tmp_path / name) for name in ("one", "two", "resumed")}
    # the same global batches: rank 0's producer makes them as one process does, whatever the process count
    for key in ("reward/mean", "rollout/tokens", "async/version", "sampling/completions", "spent/completions"):
        assert [r[key] for r in rows["one"]] == [r[key] for r in rows["two"]], key
    assert [r["async/version"] for r in rows["two"]] == [0.0, 0.0, 0.0, 1.0]  # k = 2: batch 4 sampled by the policy after step 1
    assert [r["batch/groups"] for r in rows["two"]] == [4.0] * STEPS  # each rank trains half of the 8 groups
    gaps = [r["sync/logprob_gap_mean"] for r in rows["two"] if "sync/logprob_gap_mean" in r]
    assert gaps and max(gaps) < 1e-4  # every version the server loaded matched the sharded trainers' (the sync probe)
    weights = {name: load_file(tmp_path / name / "final" / "model.safetensors") for name in rows}
    assert weights["one"].keys() == weights["two"].keys()
    worst = max(float((t - weights["two"][k]).abs().max()) for k, t in weights["one"].items())
    assert worst < ATOL, worst  # measured 3.9e-6 over 3 steps
    base = load_file(sft_base / "model.safetensors")
    assert any(not torch.equal(base[k], t) for k, t in weights["two"].items() if k in base)  # it trained
    # the producer's state is saved once, with the run's state, and a resume continues the run exactly
    state = torch.load(tmp_path / "two" / "checkpoints" / "step-2" / "trainer_state.pt", weights_only=False)
    assert state["recipe"]["async"]["max_staleness"] == 2 and state["recipe"]["async"]["rounds"]
    assert [r["step"] for r in rows["resumed"]] == [3, 4]
    for key in ("reward/mean", "rollout/tokens", "async/version"):
        assert [r[key] for r in rows["resumed"]] == [r[key] for r in rows["two"][2:]], key
    for key, tensor in weights["two"].items():
        assert torch.equal(tensor, weights["resumed"][key]), key


@pytest.mark.slow
def test_a_generation_side_that_fails_stops_every_rank_naming_it_and_keeps_the_last_checkpoint(sft_base, tmp_path):
    """The last rollout server dies mid-run: rank 0's producer fails, every rank gets its error in
    place of the batch and stops (none is left waiting in a collective), and the last checkpoint stays."""
    import time

    server = rollout_server(sft_base, "hf.decode=kv", engine="hf", device="cpu")
    with server as url:
        args = _args(tmp_path, "run", sft_base, url, 4, "update.steps=8", "log.checkpoint_every=1", "rollout.async.restarts=0",
                     "rollout.vllm.server_wait_s=2")
        with Trainers(tmp_path / "run.log", *args, processes=2, forked=True) as run:
            deadline = time.monotonic() + 600
            while not (tmp_path / "run" / "checkpoints" / "step-2").is_dir() and run.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            server.kill()
            code = run.wait(600)
            said = run.output()
    assert code != 0, said[-3000:]
    assert "completed:" not in said and not (tmp_path / "run" / "final").exists()
    assert url in said and "with no restart left" in said, said[-3000:]  # the server named, on the console
    assert [line for line in said.splitlines() if line.startswith("error:") and url in line], said[-3000:]
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.startswith("step-") and "." not in p.name)
    assert "step-2" in kept



@pytest.mark.slow
def test_two_processes_stopped_by_an_environment_server_outage_keep_the_checkpoint_from_before_and_resume(sft_base, served, tmp_path):
    """The environment server (``remote-v1``) is killed after step 2 of 8: the batches verified from then
    on fail, two steps in a row, and every rank stops. No checkpoint is written for a failed step (the
    rotation keeps the state from before the outage) and a resume by both processes on a new server
    generates the failed batches again and completes (it used to wait for a batch the stop had lost)."""
    import time

    fails = ("verify.max_failed_steps=2", "update.steps=8", "log.checkpoint_every=1", "log.keep_checkpoints=2", "task.env=remote-v1")
    args = _args(tmp_path, "run", sft_base, served, 2, *fails)
    server = env_server("math-v1", "--task", "arithmetic-v1", token="outage-token")
    with server as env_url, Trainers(tmp_path / "run.log", *args, f"task.env_kwargs={{url: [{env_url}]}}", processes=2,
                                     env={"RLVR_ENV_TOKEN": "outage-token"}, forked=True) as run:
        while len(metrics(tmp_path / "run")) < 2 and run.proc.poll() is None:
            time.sleep(0.1)
        server.kill()
        code = run.wait(900)
        said = run.output()
    assert code != 0 and "every verification failed for 2 consecutive steps" in said, said[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    failed = [r["step"] for r in rows if r.get("verify/errors", 0) == r.get("sampling/completions", -1)]
    kept = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert failed and kept and kept[-1] < failed[0], (kept, failed, said[-3000:])  # none written for a failed step
    with env_server("math-v1", "--task", "arithmetic-v1", token="outage-token") as env_url, \
            Trainers(tmp_path / "resumed.log", *args, f"task.env_kwargs={{url: [{env_url}]}}", "resume=true", processes=2,
                     env={"RLVR_ENV_TOKEN": "outage-token"}, forked=True) as run:
        code = run.wait(900)
        said = run.output()
    assert code == 0 and f"step-{kept[-1]}" in said and said.count("completed: 8 steps") == 1, said[-3000:]
    tail = metrics(tmp_path / "run")[-(8 - kept[-1]):]
    assert [r["step"] for r in tail] == list(range(kept[-1] + 1, 9)) and all(r["verify/errors"] == 0 for r in tail), tail
