"""Every algorithm preset through the same training entry point, on the real embedded model:
dynamic sampling keeps zero-variance groups out of every step within its budget, PRIME trains and
checkpoints its implicit PRM, and the per-step metrics every run promises are logged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr.algos.config import PRESETS, resolve_algorithm
from rlvr.config import load_config
from rlvr.logged_metrics import undeclared
from rlvr.train import TrainConfig, train
from tests.rlvr.gloo import train_in_two_processes

pytestmark = pytest.mark.slow

SMALL = ("rollout.prompts_per_step=8", "rollout.group_size=4", "rollout.chunk_prompts=8", "eval.every=0",
         "eval.at_start=false", "log.tensorboard=false", "log.plot=false")

# every run logs these (KL only when a reference model is loaded)
ALWAYS = ("reward/mean", "reward/accuracy", "rollout/response_len", "policy/entropy", "rollout/logprob_gap",
          "groups/zero_variance_frac", "sampling/yield", "sampling/prompts", "verify/errors", "verify/timeouts",
          "time/generate", "time/verify_wait", "time/train", "loss/policy")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preset", [name for name, p in PRESETS.items() if p["recipe"] == "policy_gradient"])
def test_every_policy_gradient_preset_trains_through_the_same_entry_point(preset, sft_base, tmp_path, rl_overrides):
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, f"algo.preset={preset}", "update.steps=2",
                                                              "update.minibatches=2", *SMALL))
    result = train(cfg)
    assert result.status == "completed" and result.steps == 2
    rows = metrics(result.run_dir)
    last = rows[-1]
    for key in ALWAYS:
        assert key in last, (preset, key)
    assert undeclared(k for r in rows for k in r) == [], "declare these in rlvr/logged_metrics.py"
    if resolve_algorithm(cfg.algo).needs_reference:  # KL to the reference is logged whenever one is loaded
        assert "policy/kl" in last
    if preset not in ("gpg",):  # the second minibatch is off-policy: ratios move, clipping is measured on both sides
        assert {"policy/clip_frac_low", "policy/clip_frac_high", "policy/ratio_min", "policy/ratio_max"} <= set(last)
    if preset == "prime":
        assert 0.0 <= last["prm/accuracy"] <= 1.0 and "prm/loss" in last
        prm = result.run_dir / "checkpoints" / "step-2" / "prm"
        assert (prm / "model.safetensors").exists() and (prm / "optimizer.pt").exists()
    if preset == "ppo":
        assert {"critic/value_loss", "critic/explained_variance", "critic/return_mean", "advantage/std"} <= set(last)


def test_dynamic_sampling_never_trains_on_a_zero_variance_group_and_respects_its_budget(sft_base, tmp_path, rl_overrides):
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "algo.preset=dapo", "algo.sampling_budget=2",
                                                              "update.steps=4", "rollout.chunk_prompts=4", *SMALL))
    result = train(cfg)
    assert result.status == "completed"
    rows = metrics(result.run_dir)
    assert len(rows) == 4
    for r in rows:
        assert r["sampling/budget_prompts"] == 16 and r["sampling/prompts"] <= 16
        if r.get("train/skipped"):
            continue
        assert r["batch/zero_variance_frac"] == 0.0  # every trained group has a reward spread
        assert r["batch/groups"] <= 8
    # the base solves some groups completely or not at all: they were generated, and dropped
    assert any(r["groups/zero_variance_frac"] > 0 for r in rows)
    assert any(r["sampling/extra_prompts"] > 0 for r in rows)


def test_a_spent_budget_trains_on_what_it_has_and_logs_it(sft_base, tmp_path, rl_overrides):
    # keep only groups that are mostly right (pass rate >= 0.7): a minority for this base, so the
    # budget of 12 prompts runs out with a partial batch, and the step trains on it
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "algo.accuracy_band=[0.7, 1.0]",
                                                              "algo.sampling_budget=1.5", "update.steps=4", *SMALL))
    result = train(cfg)
    assert result.status == "completed" and result.steps == 4
    rows = metrics(result.run_dir)
    assert all(r["sampling/prompts"] <= 12 for r in rows)
    partial = [r for r in rows if r["sampling/budget_exhausted"] == 1.0 and 0 < r.get("batch/groups", 0) < 8]
    # a partial batch trains, unless every group it kept is all right (no gradient: skipped, and counted)
    assert partial and all(("loss/policy" in r and not r.get("train/skipped"))
                           or (r.get("train/skipped_no_signal") and r["batch/zero_variance_frac"] == 1.0) for r in partial)
    assert any("loss/policy" in r for r in partial)


def test_nothing_kept_skips_the_step_without_failing_the_run(sft_base, tmp_path, rl_overrides):
    # DAPO drops zero-variance groups, and this band keeps only all-correct ones: nothing can pass
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "algo.preset=dapo", "algo.accuracy_band=[0.99, 1.0]",
                                                              "algo.sampling_budget=1.5", "update.steps=2", *SMALL))
    result = train(cfg)
    assert result.status == "completed" and result.steps == 2
    rows = metrics(result.run_dir)
    assert [(r["train/skipped"], r["sampling/kept_groups"], r["sampling/budget_exhausted"]) for r in rows] == [(1.0, 0.0, 1.0)] * 2
    assert rows[1]["data/position"] == 24  # each step still reads (and pays for) its budget of prompts


def test_prime_resumes_with_its_trained_reward_model(sft_base, tmp_path, rl_overrides, capsys):
    args = rl_overrides(tmp_path, sft_base, "algo.preset=prime", *SMALL)
    train(load_config(TrainConfig, "quickstart", [*args, "update.steps=1"]))
    saved = tmp_path / "run" / "checkpoints" / "step-1"
    assert (saved / "prm" / "model.safetensors").exists() and (saved / "prm" / "optimizer.pt").exists()
    result = train(load_config(TrainConfig, "quickstart", [*args, "update.steps=2", "resume=true"]))
    assert result.status == "completed" and result.steps == 2
    assert f"resumed from {saved}" in capsys.readouterr().out
    assert [r["step"] for r in metrics(result.run_dir)] == [1, 2]


def test_two_processes_train_with_dynamic_sampling_in_lockstep(sft_base, tmp_path, rl_overrides):
    """A real two-process (gloo) run: the processes share one prompt stream, fill one global batch
    of 2 x 8 groups between them (surplus goes to the lower ranks), and sync gradients every minibatch."""
    args = rl_overrides(tmp_path, sft_base, "algo.preset=dapo", "update.steps=3", "update.minibatches=2", "rollout.chunk_prompts=4", *SMALL)
    train_in_two_processes("quickstart", *args, steps=3)
    rows = metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["batch/zero_variance_frac"] == 0.0
        assert r["sampling/prompts"] <= r["sampling/budget_prompts"] == 24  # per process: 3 x 8
    # every process reads its share of each request: the stream advances by twice what rank 0 generated
    assert rows[-1]["data/position"] == 2 * sum(r["sampling/prompts"] for r in rows)


def test_verifier_process_rewards_train_end_to_end(sft_base, tmp_path, rl_overrides):
    """GRPO process supervision (grpo_process) on the math checker's step rewards: the per-step
    rewards reach samples.jsonl, advantages differ within a completion, and held-out accuracy rises."""
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "algo.preset=grpo_process", "update.steps=6",
                                                              "rollout.prompts_per_step=16", "eval.every=6", "eval.at_start=true", "eval.limit=100",
                                                              "log.samples_per_step=32", "log.tensorboard=false", "log.plot=false"))
    result = train(cfg)
    assert result.status == "completed"
    rows = metrics(result.run_dir)
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    assert evals[6] >= evals[0] + 0.10, evals  # seeds 0 and 1: 0.34 -> 0.69 and 0.67
    assert all(r["verify/steps_per_completion"] > 0 for r in rows if "reward/mean" in r)
    samples = [json.loads(line) for line in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    with_steps = [s for s in samples if s.get("steps")]
    assert with_steps and all({"start", "end", "reward", "label"} <= set(step) for s in with_steps for step in s["steps"])
    assert {step["reward"] for s in with_steps for step in s["steps"]} == {0.0, 1.0}  # right and wrong steps both occur


def test_kl_is_monitored_and_the_reference_refreshed(sft_base, tmp_path, rl_overrides):
    # dapo has no KL: with kl_mode=monitor the reference is loaded and the KL logged, the loss unchanged
    monitored = train(load_config(TrainConfig, "quickstart", rl_overrides(tmp_path / "m", sft_base, "algo.preset=dapo", "algo.kl_mode=monitor",
                                                                          "update.steps=2", "optim.warmup_steps=0", *SMALL)))
    rows = metrics(monitored.run_dir)
    assert all("policy/kl" in r for r in rows) and rows[1]["policy/kl"] > 0
    assert rows[1]["loss/total"] == pytest.approx(rows[1]["loss/policy"], abs=1e-7)
    # refreshing the reference after every step: each step starts with policy == reference, so the
    # KL measured by its (single, on-policy) update is exactly 0
    refreshed = train(load_config(TrainConfig, "quickstart", rl_overrides(tmp_path / "r", sft_base, "algo.ref_update_every=1",
                                                                          "update.steps=3", "optim.warmup_steps=0", *SMALL)))
    rows = metrics(refreshed.run_dir)
    assert [r.get("policy/reference_refreshed") for r in rows] == [1.0, 1.0, 1.0]
    assert rows[1]["policy/kl"] == 0.0 and rows[2]["policy/kl"] == 0.0
    assert (refreshed.run_dir / "checkpoints" / "step-3" / "reference" / "model.safetensors").exists()


def test_bad_critic_and_reference_inputs_are_named_before_training(sft_base, tmp_path, rl_overrides):
    from transformers import AutoTokenizer

    from rlvr import UserError

    other = tmp_path / "other-tokenizer"
    tok = AutoTokenizer.from_pretrained(sft_base)
    tok.add_tokens(["<extra>"])
    tok.save_pretrained(other)
    args = rl_overrides(tmp_path, sft_base, "algo.preset=ppo", "update.steps=1", *SMALL)
    with pytest.raises(UserError, match="algo.critic.init: the tokenizer at .* differs from the policy's"):
        train(load_config(TrainConfig, "quickstart", [*args, f"algo.critic.init={other}"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="algo.critic.init: .*has no tokenizer"):
        train(load_config(TrainConfig, "quickstart", [*args, f"algo.critic.init={tmp_path / 'empty'}", "name=run2"]))
    # a resumed run whose base model (the frozen reference) is gone says which setting needs it
    import shutil

    base = tmp_path / "base"
    shutil.copytree(sft_base, base)
    grpo = rl_overrides(tmp_path, base, "update.steps=1", "name=grpo", *SMALL)
    train(load_config(TrainConfig, "quickstart", grpo))
    shutil.rmtree(base)
    with pytest.raises(UserError, match=r"reference model .* algo.kl.mode=loss"):
        train(load_config(TrainConfig, "quickstart", [*grpo, "update.steps=2", "resume=true"]))


def test_two_processes_shard_the_policy_with_fsdp_and_match_ddp(sft_base, tmp_path, rl_overrides):
    """FSDP2 through accelerate under torchrun (gloo): the same step as DDP (same samples, same
    update up to float rounding) and sharded optimizer state in the checkpoint. A sharded model
    generates with `generate` (every forward is a collective, stepped in lockstep), so DDP does too
    here: the same sampler draws the same tokens. (Resuming such a checkpoint is test_async_ranks.py's
    first test, by two processes, to the same weights exactly; and test_multinode.py's, by one.)"""
    def run(name: str, *extra: str) -> None:
        args = rl_overrides(tmp_path, sft_base, f"name={name}", "update.steps=1", "update.minibatches=2", "rollout.prompts_per_step=4",
                            "rollout.group_size=4", "optim.warmup_steps=0", "rollout.hf.decode=generate", *SMALL, *extra)
        train_in_two_processes("quickstart", *args, steps=1)

    run("ddp", "distributed=ddp")
    run("fsdp", "distributed=fsdp")
    assert (tmp_path / "fsdp" / "checkpoints" / "step-1" / "policy" / "optimizer_shards").is_dir()
    from safetensors.torch import load_file

    ddp, fsdp, base = (load_file(p / "model.safetensors") for p in (tmp_path / "ddp" / "final", tmp_path / "fsdp" / "final", sft_base))
    assert ddp.keys() == fsdp.keys()
    assert all(torch.allclose(ddp[k], fsdp[k], atol=1e-5) for k in ddp)
    assert any(not torch.allclose(ddp[k], base[k]) for k in ddp)  # and the step did change the weights


def test_a_weight_sync_that_does_not_arrive_stops_the_run(sft_base, tmp_path, rl_overrides, monkeypatch):
    """The engine generates from its own copy of the weights (rollout.overlap); break its sync on
    purpose and the probe, scored by engine and trainer after every sync, stops the run."""
    from rlvr.rollout.engines.hf import HFGenerateEngine
    from rlvr.rollout.sync import WeightSyncError

    monkeypatch.setattr(HFGenerateEngine, "load_weights", lambda self, model: None)  # the update never reaches the engine
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "rollout.overlap=true", "update.steps=4",
                                                              "optim.warmup_steps=0", *SMALL))
    with pytest.raises(WeightSyncError, match="did not arrive|rollout.probe.max_gap"):
        train(cfg)
    rows = metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1]  # it stopped at the first sync after an update
    assert json.loads((tmp_path / "run" / "run_state.json").read_text())["status"].startswith("failed: WeightSyncError")


def test_a_correct_weight_sync_passes_its_probe_every_step(sft_base, tmp_path, rl_overrides):
    cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, "rollout.overlap=true", "update.steps=3",
                                                              "optim.warmup_steps=0", *SMALL))
    assert train(cfg).status == "completed"
    rows = metrics(tmp_path / "run")
    assert [r["rollout/staleness"] for r in rows] == [0.0, 1.0, 1.0]  # the first batch is on-policy, then one step behind
    gaps = [r["sync/logprob_gap_mean"] for r in rows if "sync/logprob_gap_mean" in r]
    assert len(gaps) == 3 and max(gaps) < 1e-5  # when the probe is made, and after each of the two syncs
    assert undeclared(k for r in rows for k in r) == []


def test_overlap_scores_the_frozen_reference_ahead_with_the_same_numbers(sft_base, tmp_path, rl_overrides, monkeypatch):
    """With rollout.overlap the reference's log-probs of the next batch are computed in the
    background thread while this one trains; the run is bit-identical to computing them in the update."""
    from safetensors.torch import load_file

    from rlvr.train.policy_gradient import PolicyGradient

    calls = []
    original = PolicyGradient._prescore_reference

    def counted(self, report):
        calls.append(len(report.kept))
        original(self, report)

    def run(name: str) -> tuple[dict, list[dict]]:
        cfg = load_config(TrainConfig, "quickstart", rl_overrides(tmp_path, sft_base, f"name={name}", "rollout.overlap=true",
                                                                  "update.steps=3", "optim.warmup_steps=0", *SMALL))
        assert train(cfg).status == "completed"
        return load_file(tmp_path / name / "final" / "model.safetensors"), metrics(tmp_path / name)

    monkeypatch.setattr(PolicyGradient, "_prescore_reference", counted)
    ahead, ahead_rows = run("ahead")
    assert len(calls) == 3  # the batches of steps 2 and 3, and the one generated after the last step
    monkeypatch.setattr(PolicyGradient, "_prescore_reference", lambda self, report: None)
    inline, inline_rows = run("inline")
    assert all(torch.equal(ahead[k], inline[k]) for k in ahead)
    assert [r["policy/kl"] for r in ahead_rows] == [r["policy/kl"] for r in inline_rows]
