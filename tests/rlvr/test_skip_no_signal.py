"""A policy-gradient step with nothing to learn from is skipped (issue 20): a random model gets
every arithmetic problem wrong, so every group has zero reward spread and every group-relative
advantage is 0; the update has no gradient (only AdamW's weight decay would move the weights, and
does without the skip), and used to cost a full backward pass per micro-batch (159 s a step on the
real model)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.models.tiny import TinyModelConfig, build_tiny_model

STEPS = ("update.steps=2", "optim.warmup_steps=0", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
         "eval.at_start=false", "eval.every=0", "log.checkpoint_every=0", "log.progress=false", "log.tensorboard=false", "log.plot=false",
         "threads=1")


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    return build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), tmp_path_factory.mktemp("m") / "m")


def run(tmp_path, model, preset):
    assert main(["train", "quickstart", f"output_dir={tmp_path}", f"name={preset}", f"model.name_or_path={model}",
                 f"algo.preset={preset}", *STEPS]) == 0
    return [json.loads(line) for line in (tmp_path / preset / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preset", ["grpo", "dr_grpo"])  # grpo's KL term has no gradient while the policy is its reference
def test_a_step_without_reward_spread_is_skipped_and_leaves_the_weights(tmp_path, random_model, preset):
    rows = run(tmp_path, random_model, preset)
    assert all(r["groups/zero_variance_frac"] == 1.0 for r in rows)
    assert [(r.get("train/skipped"), r.get("train/skipped_no_signal")) for r in rows] == [(1.0, 1.0)] * 2
    assert all("loss/total" not in r for r in rows)
    before, after = load_file(random_model / "model.safetensors"), load_file(tmp_path / preset / "final" / "model.safetensors")
    assert all((before[k] == after[k]).all() for k in before)


def test_a_critic_still_learns_when_rewards_have_no_spread(tmp_path, random_model):
    rows = run(tmp_path, random_model, "ppo")
    assert not any(r.get("train/skipped") for r in rows) and all("critic/value_loss" in r for r in rows)


def test_completions_past_the_models_context_are_counted_and_said_once(tmp_path, capsys):
    """A model built for 24 positions asked for 16 new tokens after prompts of about 15: the run
    completes, counts the overflowing completions every step and warns once."""
    short = build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64, max_positions=24), tmp_path / "short")
    assert main(["train", "quickstart", f"output_dir={tmp_path}", "name=ctx", f"model.name_or_path={short}", *STEPS,
                 "rollout.max_new_tokens=16"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "ctx" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["rollout/over_context"] > 0 for r in rows)
    assert capsys.readouterr().out.count("ran past the model's context of 24 tokens") == 1
