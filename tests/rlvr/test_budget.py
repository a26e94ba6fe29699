"""A run's budget (`rlvr.train.budget`): completions generated, optimizer steps and seconds are
counted every step, logged as ``spent/*``, kept across a resume, and stop the run after the step
that reaches a ``budget.*`` limit, as a completed run with its final model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.train import TrainConfig
from rlvr.train.budget import BudgetConfig, Spent


def test_the_first_limit_reached_is_named():
    spent = Spent()
    budget = BudgetConfig(completions=100, optimizer_steps=3)
    spent.charge(64, 1, 0.5)
    assert spent.exhausted(budget) is None
    spent.charge(64, 2, 0.5)
    assert spent.exhausted(budget) == "budget.completions=100"
    assert spent.metrics() == {"spent/completions": 128.0, "spent/optimizer_steps": 2.0, "spent/seconds": 1.0}
    assert Spent().exhausted(BudgetConfig()) is None and not BudgetConfig().active
    assert Spent(0, 3, 0).exhausted(BudgetConfig(optimizer_steps=3)) == "budget.optimizer_steps=3"
    assert Spent(0, 0, 2.5).exhausted(BudgetConfig(seconds=2.5)) == "budget.seconds=2.5"
    assert Spent.from_state(spent.state_dict()) == spent and Spent.from_state(None) == Spent()


def test_budget_keys_are_config_keys_with_bounds():
    cfg = load_config(TrainConfig, "quickstart", ["budget.completions=20000", "budget.seconds=90"])
    assert cfg.budget == BudgetConfig(completions=20000, seconds=90.0) and cfg.budget.active
    with pytest.raises(ConfigError, match="budget.optimizer_steps' must be > 0"):
        load_config(TrainConfig, "quickstart", ["budget.optimizer_steps=0"])


# -- real runs on an untrained tiny model -----------------------------------------------------------

@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    return build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), tmp_path_factory.mktemp("tiny"))


def _run(out: Path, model: Path, *extra: str):
    from rlvr.train import train

    cfg = load_config(TrainConfig, "quickstart", [
        f"output_dir={out}", "name=run", f"model.name_or_path={model}", "threads=1", "rollout.prompts_per_step=4", "rollout.group_size=2",
        "rollout.max_new_tokens=6", "rollout.chunk_prompts=4", "eval.every=0", "eval.at_start=false", "log.progress=false",
        "log.tensorboard=false", "log.plot=false", "log.checkpoint_every=1", "optim.warmup_steps=0", *extra])
    return train(cfg)


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_completions_budget_stops_the_run_after_the_step_that_spends_it_and_survives_a_resume(untrained, tmp_path):
    result = _run(tmp_path, untrained, "update.steps=50", "budget.completions=20")  # 8 completions a step
    assert result.status == "completed" and result.steps == 3 and (tmp_path / "run" / "final" / "config.json").is_file()
    rows = _rows(tmp_path / "run")
    assert [r["spent/completions"] for r in rows] == [8.0, 16.0, 24.0]
    assert all(r["sampling/completions"] == 8.0 for r in rows)
    state = json.loads((tmp_path / "run" / "run_state.json").read_text())
    assert state["stopped_by"] == "budget.completions=20" and state["spent"]["completions"] == 24.0
    # a larger budget continues from what was spent, not from 0
    resumed = _run(tmp_path, untrained, "update.steps=50", "budget.completions=40", "resume=true")
    assert resumed.status == "completed" and resumed.steps == 5
    assert [r["spent/completions"] for r in _rows(tmp_path / "run")] == [8.0, 16.0, 24.0, 32.0, 40.0]
    assert [r["spent/seconds"] for r in _rows(tmp_path / "run")] == sorted(r["spent/seconds"] for r in _rows(tmp_path / "run"))


@pytest.mark.slow
def test_an_optimizer_steps_budget_counts_each_of_ppos_steps(untrained, tmp_path):
    # PPO: 2 epochs x 2 minibatches per batch; an entropy bonus gives a gradient even when every reward is 0
    result = _run(tmp_path, untrained, "algo.preset=ppo", "algo.entropy_coef=0.01", "update.steps=10", "budget.optimizer_steps=6")
    rows = _rows(tmp_path / "run")
    assert result.status == "completed" and result.steps == 2
    assert [r["spent/optimizer_steps"] for r in rows] == [4.0, 8.0]


@pytest.mark.slow
def test_a_seconds_budget_and_the_upper_bound(untrained, tmp_path):
    result = _run(tmp_path / "a", untrained, "update.steps=10", "budget.seconds=0.001")
    assert result.status == "completed" and result.steps == 1
    assert _rows(tmp_path / "a" / "run")[0]["spent/seconds"] == pytest.approx(_rows(tmp_path / "a" / "run")[0]["time/step"])
    unspent = _run(tmp_path / "b", untrained, "update.steps=2", "budget.completions=1000")  # update.steps stays the upper bound
    assert unspent.status == "completed" and unspent.steps == 2
    assert json.loads((tmp_path / "b" / "run" / "run_state.json").read_text())["stopped_by"] is None
