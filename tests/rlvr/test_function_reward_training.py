"""The few-lines path from Python: a reward function (`envs.from_function`) and an in-memory
`datasets.Dataset` (`tasks.from_dataset`) train the embedded model, named by a config like any
registered environment and task."""

from __future__ import annotations

import json
import random

import datasets
import pytest

import envs
import tasks
from envs.rewards import math_answer
from rlvr.config import load_config
from rlvr.train import TrainConfig, train

pytestmark = pytest.mark.slow

CALLS: list[str] = []


def sum_reward(problem, completion):
    """The math checker's verdict on the final answer (what the function saw is counted)."""
    CALLS.append(completion)
    return math_answer(completion, problem.reference)


def test_a_reward_function_trains_the_embedded_model_on_an_in_memory_dataset(sft_base, tmp_path, rl_overrides):
    rng = random.Random(0)
    pairs = {(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(200)}
    # worded as arithmetic-v1 words its prompts (newline included), the sums the SFT base was warmed up on:
    # it then answers a good share of them on any CPU's rounding, instead of a few by luck
    rows = [{"question": f"Compute {a}+{b}.\n", "answer": str(a + b)} for a, b in sorted(pairs)]
    try:
        envs.from_function(sum_reward, id="test/sum-reward-v1")
        task = tasks.from_dataset(datasets.Dataset.from_list(rows), env="test/sum-reward-v1", id="test/sums-v1")
        cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "task.id=test/sums-v1", "update.steps=2",
                                                                  "rollout.prompts_per_step=8", "rollout.group_size=4", "eval.every=2",
                                                                  "eval.limit=8", "log.tensorboard=false", "log.plot=false"))
        result = train(cfg)
    finally:
        tasks.TASKS.unregister("test/sums-v1")
        envs.ENVS.unregister("test/sum-reward-v1")
    assert result.status == "completed" and result.steps == 2
    steps = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in steps if "reward/mean" in r]
    assert [r["step"] for r in updates] == [1, 2] and all(r["verify/errors"] == 0 for r in updates)
    assert any(r.get("reward/mean", 0) > 0 for r in updates), "the SFT base answers some sums: the function's rewards reach the update"
    assert "eval/accuracy" in steps[-1]
    assert len(CALLS) >= 2 * 8 * 4 + 8  # every sampled completion and every evaluated one went through the function
    samples = [json.loads(line) for line in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and {s["status"] for s in samples} <= {"ok", "no_answer"}
    validation = {p.prompt for p in task.problems("validation")}
    assert validation and not validation & {p.prompt for p in task.problems("train")}
