"""Sequences with a zero advantage and no other loss term are not forwarded by the update (issue
20: on the real model most groups have no reward spread, and their sequences used to cost a
forward and backward each), yet the update is the same: they still count in the loss's totals."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.train import TrainConfig, train
from rlvr.train.policy_gradient import PolicyGradient

pytestmark = pytest.mark.slow

SMALL = ("update.steps=1", "optim.warmup_steps=0", "rollout.prompts_per_step=8", "rollout.group_size=4", "rollout.chunk_prompts=8",
         "rollout.max_new_tokens=32", "update.micro_batch_size=4", "eval.every=0", "eval.at_start=false", "log.tensorboard=false",
         "log.plot=false", "log.checkpoint_every=0")


def run(tmp_path, name, sft_base, rl_overrides, *extra):
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, f"name={name}", *SMALL, *extra))
    result = train(cfg)
    assert result.status == "completed"
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows[-1], load_file(result.run_dir / "final" / "model.safetensors")


@pytest.mark.parametrize("preset", ["dr_grpo", "grpo"])
def test_skipping_zero_advantage_sequences_gives_the_same_update(preset, tmp_path, sft_base, rl_overrides, monkeypatch):
    skipped, after_skip = run(tmp_path, "skip", sft_base, rl_overrides, f"algo.preset={preset}", "algo.kl_mode=off")
    assert 0.0 < skipped["train/idle_rows_frac"] < 1.0, "the batch must mix groups with and without reward spread"
    monkeypatch.setattr(PolicyGradient, "_idle_rows", lambda self, advantages, mask: None)
    full, after_full = run(tmp_path, "full", sft_base, rl_overrides, f"algo.preset={preset}", "algo.kl_mode=off")
    assert "train/idle_rows_frac" not in full
    assert skipped["reward/mean"] == full["reward/mean"]  # the same batch
    base = load_file(sft_base / "model.safetensors")
    moved = max(float((after_full[k] - base[k]).abs().max()) for k in base)
    assert moved > 1e-4  # the step did change the weights
    for k in after_full:  # same update up to the order of float sums
        torch.testing.assert_close(after_skip[k], after_full[k], rtol=0, atol=moved * 1e-3)


def test_a_kl_term_in_the_loss_forwards_every_sequence(tmp_path, sft_base, rl_overrides):
    last, _ = run(tmp_path, "kl", sft_base, rl_overrides, "algo.preset=grpo", "update.steps=1")
    assert "train/idle_rows_frac" not in last
