"""Cluster in a box (the `cluster` lane, scripts/test_cluster.sh): every process of a cluster on this
machine, on 127.0.0.1, with the commands of docs/scaling.md:

- 2 trainer processes: ``torchrun --nproc-per-node 2 -m rlvr.cli train`` with FSDP2 over gloo;
- 2 generation servers: ``rlvr rollout serve --engine hf`` (``rollout.engine=vllm_server``);
- 2 environment servers: ``rlvr envs serve code-v1`` (``task.env=remote-v1``), each running every
  completion against its tests in its own sandbox;
- asynchronous training, ``rollout.async.max_staleness=2`` (rank 0 runs the producer).

GRPO on program synthesis from the embedded model warmed up on it (``sft_code_quickstart``, fewer
steps), 6 steps. Run once clean, and once with one generation server and one environment server
killed mid-run (after step 1): both complete, and end with the same weights, bit for bit (every sampling seed is a
function of (seed, round, call), never of which server answered; a verification is retried on the
other server, never scored 0; the two runs have the same process count, so the same reductions).

Skipped unless ``RLVR_CLUSTER_LANE=1`` (set by scripts/test_cluster.sh): the lane runs on its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from tests.cluster.box import Trainers, env_server, metrics, rollout_server

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

if os.environ.get("RLVR_CLUSTER_LANE") != "1":
    pytest.skip("the cluster-in-a-box lane runs on its own: scripts/test_cluster.sh", allow_module_level=True)

TOKEN = "cluster-in-a-box-token-0123"
STEPS = 6
TASK_CONFIG = '{templates: ["x+{0}", "x-{0}", "x*{0}"], x_range: [0, 2], const_max: 999, table_frac: 0.7}'  # as code_quickstart
RUN_TIMEOUT_S = 420


def _train_args(out: Path, name: str, base: Path, generation: list[str], verification: list[str]) -> list[str]:
    return ["code_quickstart", f"output_dir={out}", f"name={name}", f"model.name_or_path={base}", "threads=1", "device=cpu",
            "distributed=fsdp", "rollout.engine=vllm_server", f"rollout.vllm.server_urls=[{','.join(generation)}]",
            "rollout.vllm.prompts_per_request=2", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=32",
            "rollout.chunk_prompts=4", "rollout.async.max_staleness=2", "task.env=remote-v1",
            f"task.env_kwargs={{url: [{', '.join(verification)}]}}", f"update.steps={STEPS}", "update.micro_batch_size=16",
            "optim.warmup_steps=0", "eval.every=0", "eval.at_start=false", "log.checkpoint_every=3", "log.progress=false",
            "log.tensorboard=false", "log.plot=false"]


def _answered(url: str) -> int:
    return int(httpx.get(f"{url}/health", timeout=10).json()["answered"].get("200", 0))


def test_clean_and_faulted_cluster_runs_end_with_the_same_weights(code_sft_base, tmp_path):
    gen_b, env_b = rollout_server(code_sft_base, "hf.decode=kv", engine="hf", device="cpu"), env_server(
        "code-v1", "--task", "program-synthesis-v1", "--task-config", TASK_CONFIG, token=TOKEN)
    with rollout_server(code_sft_base, "hf.decode=kv", engine="hf", device="cpu") as g1, gen_b as g2, \
            env_server("code-v1", "--task", "program-synthesis-v1", "--task-config", TASK_CONFIG, token=TOKEN) as e1, env_b as e2:
        env = {"RLVR_ENV_TOKEN": TOKEN}
        with Trainers(tmp_path / "clean.log", *_train_args(tmp_path, "clean", code_sft_base, [g1, g2], [e1, e2]), env=env) as clean:
            assert clean.wait(RUN_TIMEOUT_S) == 0, clean.output()[-5000:]
        both_verified = [_answered(e1), _answered(e2)]
        with Trainers(tmp_path / "faulted.log", *_train_args(tmp_path, "faulted", code_sft_base, [g1, g2], [e1, e2]), env=env) as faulted:
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while not metrics(tmp_path / "faulted") and faulted.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            gen_b.kill()  # mid-run, after step 1: the producer is generating the batches ahead
            env_b.kill()
            trained_before_kill = len(metrics(tmp_path / "faulted"))
            assert faulted.wait(max(1.0, deadline - time.monotonic())) == 0, faulted.output()[-5000:]
    assert all(n > 0 for n in both_verified), both_verified  # the clean run verified on both environment servers
    # k = 2: batch n is sampled by the policy after step n - 3, so with at most 2 steps trained when the
    # servers died, batches 5 and 6 were generated and verified after it (on the servers left)
    assert 1 <= trained_before_kill <= 2, trained_before_kill
    for run in (clean, faulted):
        assert run.output().count(f"completed: {STEPS} steps") == 1  # one summary line: rank 0 logs
    rows = {name: metrics(tmp_path / name) for name in ("clean", "faulted")}
    assert [r["step"] for r in rows["clean"]] == [r["step"] for r in rows["faulted"]] == list(range(1, STEPS + 1))
    assert [r["rollout/servers_alive"] for r in rows["clean"]] == [2.0] * STEPS
    assert rows["faulted"][-1]["rollout/servers_alive"] == 1.0  # the generation server lost mid-run stayed lost
    assert str(e2) in faulted.output() and "set aside" in faulted.output()  # the environment server lost mid-run, named
    for key in ("reward/mean", "rollout/tokens", "async/version", "verify/errors"):
        assert [r[key] for r in rows["clean"]] == [r[key] for r in rows["faulted"]], key
    assert sum(r["verify/errors"] + r["verify/timeouts"] for r in rows["faulted"]) == 0  # no verification lost to the fault
    gaps = [r["sync/logprob_gap_mean"] for name in rows for r in rows[name] if "sync/logprob_gap_mean" in r]
    assert gaps and max(gaps) < 1e-4  # every version each server loaded was the trainers' (the sync probe)
    weights = {name: load_file(tmp_path / name / "final" / "model.safetensors") for name in rows}
    assert weights["clean"].keys() == weights["faulted"].keys()
    for key, tensor in weights["clean"].items():
        assert torch.equal(tensor, weights["faulted"][key]), key
    base = load_file(code_sft_base / "model.safetensors")
    assert any(not torch.equal(base[k], t) for k, t in weights["clean"].items() if k in base)  # the runs did train
