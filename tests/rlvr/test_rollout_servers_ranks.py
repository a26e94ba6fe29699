"""Synchronous runs of two training processes (torchrun, gloo) on shared rollout servers
(`rollout.engine=vllm_server`, real `rlvr rollout serve --engine hf` processes on 127.0.0.1), the
topology `rlvr launch slurm` writes: rank 0 alone pushes each update to every server and runs the
probe, the other rank takes its account of the push and waits for it before generating, and under
FSDP both ranks gather the full weights first.

Each rank seeds its generate calls from its own rank, so a run of two processes does not sample what
one process samples; DDP and FSDP with two processes do sample the same, so their weights agree
within the FSDP-against-DDP tolerance, and the probe proves at every step that the servers held the
trainer's weights."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.cluster.box import Trainers, metrics
from tests.rlvr.test_multinode import cli
from tests.rlvr.rollout_server import rollout_server

pytestmark = pytest.mark.slow

ATOL = 1e-5  # the FSDP-against-DDP equality test's tolerance (tests/rlvr/test_multinode.py)
STEPS = 2
GLOBAL_PROMPTS = 8  # prompts per step over all processes


def run_args(sft_base, out, name: str, urls: list[str], distributed: str, prompts_per_step: int) -> list[str]:
    return ["quickstart", f"output_dir={out}", f"name={name}", f"model.name_or_path={sft_base}", "threads=1", "device=cpu",
            f"distributed={distributed}", "rollout.engine=vllm_server", f"rollout.vllm.server_urls=[{','.join(urls)}]",
            "rollout.vllm.prompts_per_request=2", f"rollout.prompts_per_step={prompts_per_step}", "rollout.group_size=4", "rollout.chunk_prompts=4",
            "rollout.max_new_tokens=16", f"update.steps={STEPS}", "optim.warmup_steps=0", "eval.every=0", "eval.at_start=true",
            "eval.limit=4", "eval.max_new_tokens=16", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false",
            "log.plot=false"]


def test_two_processes_on_shared_servers_push_once_per_update_and_train_what_one_process_trains(sft_base, tmp_path):
    out = tmp_path / "runs"
    runs = {"one": (1, "ddp"), "ddp": (2, "ddp"), "fsdp": (2, "fsdp")}  # name: (processes, distributed)
    with rollout_server(sft_base, "hf.decode=kv", engine="hf", device="cpu") as a, \
            rollout_server(sft_base, "hf.decode=kv", engine="hf", device="cpu") as b:
        for name, (processes, distributed) in runs.items():
            args = run_args(sft_base, out, name, [a, b], distributed, GLOBAL_PROMPTS // processes)
            if processes == 1:  # in this process: one process needs no launcher, and no imports paid again
                code, said = cli(["train", *args])
            else:
                with Trainers(tmp_path / f"{name}.log", *args, processes=processes, forked=True) as run:
                    code = run.wait(600)
                    said = run.output()
            assert code == 0, said[-4000:]
            assert said.count(f"completed: {STEPS} steps") == 1
            assert "weight update" not in said and "set aside" not in said
    rows = {name: metrics(out / name) for name in runs}
    for name, r in rows.items():
        assert [row["step"] for row in r] == list(range(1, STEPS + 1)), name
        assert [row["rollout/servers_alive"] for row in r] == [2.0] * STEPS, name
        gaps = [row["sync/logprob_gap_mean"] for row in r if "sync/logprob_gap_mean" in row]
        assert len(gaps) == STEPS and max(gaps) < 1e-5, name  # every step's push reached both servers
    weights = {name: load_file(out / name / "final" / "model.safetensors") for name in rows}
    for name in ("ddp", "fsdp"):  # every call is seeded from its problems: the same samples at any process count
        assert weights[name].keys() == weights["one"].keys()
        assert max(float((t - weights[name][k]).abs().max()) for k, t in weights["one"].items()) <= ATOL, name
    base = load_file(sft_base / "model.safetensors")
    assert any(not torch.equal(base[k], t) for k, t in weights["one"].items() if k in base)  # the runs did train
