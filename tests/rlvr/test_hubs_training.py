"""Other hubs' environments train in rlvr and are evaluated by ``rlvr eval``, like built-in tasks:
SkyRL-Gym's own ``aime`` environment (its Minerva-style ``Answer:`` check, reward +1 / -1) on
SkyRL rows of arithmetic problems, and verifiers' own ``nemo_gym`` taskset, whose reward is a NeMo
Gym verify request to a resources server (rlvr's, in its NeMo Gym dialect). The embedded model's
SFT base (warmed up on arithmetic) gets some of them right, so the groups have reward variance and
the policy is updated. A few GRPO steps each; the numbers are not the point, that every reward came
from the hub's code and none failed is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tasks
from rlvr.config import load_config
from rlvr.hubs import export
from rlvr.serve import Guards, VerifySettings, make_env_server
from rlvr.train import TrainConfig, train

pytestmark = pytest.mark.slow

STEPS = 3


def train_and_eval(tmp_path: Path, sft_base: Path, rl_overrides, task_id: str, task_config: dict) -> tuple[list[dict], dict]:
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(
        tmp_path, sft_base, f"task.id={task_id}", f"task.config={json.dumps(task_config)}", f"update.steps={STEPS}",
        "rollout.prompts_per_step=8", "rollout.group_size=4", "eval.every=0", "eval.at_start=false",
        "log.tensorboard=false", "log.checkpoint_every=0", "log.plot=false"))
    result = train(cfg)
    assert result.status == "completed" and result.steps == STEPS
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == STEPS
    assert sum(r["verify/errors"] + r["verify/timeouts"] for r in steps) == 0, steps

    from rlvr.cli import main

    out = tmp_path / "eval"
    assert main(["eval", "--model", str(result.run_dir / "final"), "--task", task_id, "--task-config", json.dumps(task_config),
                 "--limit", "16", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 16 and all(p["greedy"][0]["status"] in ("ok", "no_answer") for p in predictions)
    return steps, report


def arithmetic_rows(folder: Path) -> dict[str, str]:
    """SkyRL rows for SkyRL-Gym's aime environment (ground truth under reward_model)."""
    source = tasks.make("arithmetic-v1", direct_frac=0.5)
    files = {}
    for split in ("train", "test"):
        rows = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": p.prompt}], "env_class": "aime",
                 "reward_model": {"style": "rule", "ground_truth": str(p.reference)}, "extra_info": {"split": split, "index": i}}
                for i, p in enumerate(source.problems(split, limit=64))]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        files[split] = str(folder / f"{split}.jsonl")
    return files


def test_skyrl_gym_aime_trains_and_evaluates(tmp_path, sft_base, rl_overrides):
    steps, report = train_and_eval(tmp_path, sft_base, rl_overrides, "skyrl-gym:aime", {"data": arithmetic_rows(tmp_path)})
    rewards = [r["reward/mean"] for r in steps]
    assert all(-1.0 <= r <= 1.0 for r in rewards) and any(r > -1.0 for r in rewards), rewards  # the hub's +1 / -1 scale
    assert report["task"]["env"] == "hubs/skyrl-gym-v1" and report["problems"] == 16


def test_verifiers_nemo_gym_taskset_trains_and_evaluates(tmp_path, sft_base, rl_overrides):
    source = tasks.make("arithmetic-v1", direct_frac=0.5)
    export("nemo-gym", "math-v1", source, tmp_path / "rows", splits=["train", "test"], limit=64)
    for split in ("train", "test"):  # the tiny SFT base knows rlvr's raw prompts: show it the questions without the chat instruction
        path = tmp_path / "rows" / "data" / f"{split}.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        for row, problem in zip(rows, source.problems(split, limit=64)):
            row["responses_create_params"]["input"][-1]["content"] = problem.prompt
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    token = "train-token-0123456789"
    server, service = make_env_server(source.env, Guards(token), task=source, dialect="nemo-gym",
                                      verify=VerifySettings(workers=1, kind="thread", timeout_s=30))
    server.serve_in_thread()
    try:
        task_config = {"taskset": {"task": {"resources_url": server.url, "headers": {"Authorization": f"Bearer {token}"}}},
                       "splits": {"train": {"dataset": str(tmp_path / "rows" / "data" / "train.jsonl")},
                                  "test": {"dataset": str(tmp_path / "rows" / "data" / "test.jsonl")}}}
        steps, report = train_and_eval(tmp_path, sft_base, rl_overrides, "verifiers:nemo_gym", task_config)
        # every reward was a NeMo Gym seed_session + verify pair sent by verifiers' NeMoGymTask
        assert server.stats.get(200, 0) >= 2 * (STEPS * 8 * 4 + 16) - 2  # (the last reply may not be counted yet)
        assert 0.0 < sum(r["reward/mean"] for r in steps) / STEPS < 1.0, steps
        assert report["task"]["env"] == "hubs/verifiers-v1" and report["problems"] == 16
        assert token not in json.dumps(report) and "***" in json.dumps(report["task"])  # the header is not recorded
    finally:
        server.shutdown()
        server.server_close()
        service.close()
