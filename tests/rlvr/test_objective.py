"""The policy objective as one pure function, the new policy loss (CISPO), PPO's critic math (GAE
advantages with critic values, lambda returns, clipped value loss, explained variance), the new
estimators, and process rewards placed on tokens. Expected values are computed by hand (the
arithmetic is in the comments). The whole objective's gradient must not depend on how a batch is
split into micro-batches or processes."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist

from envs.types import StepReward, Verdict
from rlvr.algos.advantages import ADVANTAGES, AdvantageInputs, lambda_returns
from rlvr.algos.aggregation import AGGREGATIONS, Normalizer
from rlvr.algos.objective import POLICY_LOSSES, ObjectiveInputs, ObjectiveParts, PolicyLossInputs, policy_objective
from rlvr.algos.ratio import RATIOS
from rlvr.algos.value import clipped_value_loss, explained_variance, value_clip_fraction
from rlvr.rollout.base import Completion
from tests.rlvr.gloo import run_in_two_processes
from rlvr.train.accumulation import StatsAccumulator, merge_stats
from rlvr.rollout.tensors import place_step_rewards


def _inputs(rewards, groups, T=2, mask=None, **extra):
    r = torch.tensor(rewards, dtype=torch.float32)
    m = torch.ones(len(rewards), T) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return AdvantageInputs(r, torch.tensor(groups), m, torch.ones(len(rewards), dtype=torch.bool), **extra)


# -- CISPO ---------------------------------------------------------------------------------------

def test_cispo_weights_every_token_by_its_clipped_detached_ratio():
    logp = torch.log(torch.tensor([[1.5, 0.5, 6.0]])).requires_grad_()
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -2.0, 1.0]])
    mask = torch.ones(1, 3)
    ratio = RATIOS.get("token")(logp, old, mask)
    loss, stats = POLICY_LOSSES.get("cispo")(PolicyLossInputs(logp, old, ratio, adv, mask), None, 3.0)
    # weights sg(clip(r, -inf, 4)) = [1.5, 0.5, 4]; loss = -w * A * log pi
    expected = -torch.tensor([1.5, 0.5, 4.0]) * adv[0] * logp.detach()[0]
    assert torch.allclose(loss.detach()[0], expected, atol=1e-6)
    loss.sum().backward()
    # the gradient is -w * A per token: no token's gradient is dropped, the capped one is tempered
    assert torch.allclose(logp.grad[0], torch.tensor([-1.5, 1.0, -4.0]), atol=1e-6)
    assert stats["clip_frac_high"] == pytest.approx(1 / 3) and stats["clip_frac_low"] == 0.0


def test_the_clipped_surrogate_drops_the_gradient_that_cispo_keeps():
    logp = torch.log(torch.tensor([[6.0]])).requires_grad_()
    inp = PolicyLossInputs(logp, torch.zeros(1, 1), RATIOS.get("token")(logp, torch.zeros(1, 1), torch.ones(1, 1)),
                           torch.ones(1, 1), torch.ones(1, 1))
    POLICY_LOSSES.get("clipped")(inp, 0.2, 0.2)[0].sum().backward()
    assert logp.grad.item() == 0.0  # above 1 + eps with A > 0: PPO stops this token


# -- the whole objective --------------------------------------------------------------------------

def test_objective_adds_the_kl_and_the_entropy_bonus_to_the_aggregated_surrogate():
    logp = torch.log(torch.tensor([[0.5, 0.25], [0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.25], [0.5, 0.25]]))
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    ent = torch.tensor([[1.0, 2.0], [3.0, 9.0]])
    norm = Normalizer(sequences=2, tokens=3, max_len=2)
    parts = ObjectiveParts(ratio="token", policy_loss="clipped", aggregation="token_mean", kl_estimator="k1", kl_coef=0.5, entropy_coef=0.1)
    loss, stats = policy_objective(ObjectiveInputs(logp, logp, adv, mask, norm, ref, ent), parts)
    # ratio 1: surrogate -A = [-1, -1, 1]; k1 = logp - ref = [ln 2, 0, 0]; entropy [1, 2, 3]
    # token loss = -A + 0.5 k1 - 0.1 H = [-1 + 0.5 ln 2 - 0.1, -1 - 0.2, 1 - 0.3]; token mean over 3
    expected = (-1 + 0.5 * math.log(2) - 0.1 - 1.2 + 0.7) / 3
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert stats["policy_loss_sum"] == pytest.approx(-1 / 3, abs=1e-6)
    assert stats["kl"] == pytest.approx(math.log(2) / 3, abs=1e-6) and stats["entropy"] == pytest.approx(2.0)


def test_a_policy_loss_returning_the_wrong_thing_is_named_in_one_line():
    from rlvr.algos.objective import POLICY_LOSSES
    from rlvr.algos.config import algo_config

    @POLICY_LOSSES.register("testing/bare-tensor")
    def bare(inp, scale=1.0):  # forgets the statistics
        return -inp.advantages * inp.logp * scale

    try:
        parts = algo_config(policy_loss={"name": "testing/bare-tensor", "scale": 2.0}, quiet=True)
        logp, mask = torch.zeros(2, 3), torch.ones(2, 3)
        with pytest.raises(TypeError, match=r"the testing/bare-tensor policy loss returned a tensor \[2, 3\]; it must return "
                                            r"\(a tensor \[2, 3\], a dict of statistics\)"):
            policy_objective(ObjectiveInputs(logp, logp, torch.ones(2, 3), mask, Normalizer(2, 6, 3)), parts)
    finally:
        POLICY_LOSSES.unregister("testing/bare-tensor")


@pytest.mark.parametrize("parts", [
    ObjectiveParts(aggregation="seq_mean_token_mean", kl_estimator="k3", kl_coef=0.04),  # grpo
    ObjectiveParts(clip_high=0.28, aggregation="token_mean", entropy_coef=0.01),  # dapo + an entropy bonus
    ObjectiveParts(aggregation="seq_mean_token_sum_norm"),  # dr_grpo
    ObjectiveParts(ratio="sequence", clip_low=3e-4, clip_high=4e-4, aggregation="seq_mean"),  # gspo
    ObjectiveParts(policy_loss="pg"),  # gpg
    ObjectiveParts(policy_loss="cispo", clip_low=None, clip_high=3.0),  # cispo
    ObjectiveParts(dual_clip=3.0, kl_estimator="k2", kl_coef=0.1),
], ids=["grpo", "dapo", "dr_grpo", "gspo", "gpg", "cispo", "dual_clip_k2"])
def test_the_objectives_gradient_does_not_depend_on_micro_batching(parts):
    batch = _batch(seed=1)
    whole = _objective_grad(batch, parts, [torch.arange(8)])
    split = _objective_grad(batch, parts, [torch.tensor([5, 0, 7]), torch.tensor([1]), torch.tensor([2, 3, 4, 6])])
    assert torch.allclose(whole, split, atol=1e-6)


def _batch(seed: int, B: int = 8, T: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    return {
        "theta": torch.randn(B, T, generator=g) * 0.3, "old": torch.randn(B, T, generator=g) * 0.3 - 1.0,
        "ref": torch.randn(B, T, generator=g) * 0.3 - 1.0, "adv": torch.randn(B, T, generator=g),
        "ent": torch.rand(B, T, generator=g), "mask": (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).float(),
    }


def _objective_grad(b: dict[str, torch.Tensor], parts: ObjectiveParts, micro_batches: list[torch.Tensor],
                    rows: torch.Tensor | None = None) -> torch.Tensor:
    """d(loss)/d(theta) with the loss summed over micro-batches, each normalised by the totals of ``rows``."""
    theta = b["theta"].clone().requires_grad_()
    rows = torch.cat(micro_batches) if rows is None else rows
    m = b["mask"][rows]
    norm = Normalizer(sequences=float((m.sum(-1) > 0).sum()), tokens=float(m.sum()), max_len=float(m.shape[1]))
    for mb in micro_batches:
        logp = b["old"][mb] + theta[mb]  # log-probs that move with the parameters
        ent = b["ent"][mb] * (1 + theta[mb]) if parts.entropy_coef else b["ent"][mb]
        loss, _ = policy_objective(ObjectiveInputs(logp, b["old"][mb], b["adv"][mb], b["mask"][mb], norm, b["ref"][mb], ent), parts)
        loss.backward()
    return theta.grad


def _objective_in_process(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    parts = ObjectiveParts(aggregation="seq_mean_token_mean", kl_estimator="k3", kl_coef=0.04, entropy_coef=0.01)
    b = _batch(seed=2)
    mine = torch.arange(8).tensor_split(world)[rank]
    m = b["mask"][mine]
    totals = torch.tensor([float((m.sum(-1) > 0).sum()), float(m.sum())])
    dist.all_reduce(totals)  # the harness sums the objective's totals over processes
    theta = b["theta"].clone().requires_grad_()
    norm = Normalizer(sequences=float(totals[0]), tokens=float(totals[1]), max_len=6.0)
    for mb in mine.split(2):  # micro-batches inside the process too
        logp = b["old"][mb] + theta[mb]
        ent = b["ent"][mb] * (1 + theta[mb])
        loss, _ = policy_objective(ObjectiveInputs(logp, b["old"][mb], b["adv"][mb], b["mask"][mb], norm, b["ref"][mb], ent), parts)
        (loss * world).backward()  # the harness scales by the process count: DDP averages
    grad = theta.grad.clone()
    dist.all_reduce(grad)
    grad /= world  # what DDP does
    if rank == 0:
        queue.put(float((grad - _objective_grad(b, parts, [torch.arange(8)])).abs().max()))
    dist.destroy_process_group()


def test_the_objectives_gradient_does_not_depend_on_splitting_over_processes():
    assert run_in_two_processes(_objective_in_process) < 1e-6


def test_stats_accumulate_as_weighted_means_sums_and_extremes():
    acc = StatsAccumulator()
    acc.add({"kl": 1.0, "ratio_min": 0.9, "ratio_max": 1.1, "policy_loss_sum": 0.25}, weight=1.0)
    acc.add({"kl": 4.0, "ratio_min": 0.8, "ratio_max": 1.0, "policy_loss_sum": 0.5}, weight=3.0)
    assert acc.result() == {"kl": pytest.approx(3.25), "ratio_min": 0.8, "ratio_max": 1.1, "policy_loss_sum": 0.75}
    assert merge_stats([{"policy_loss_sum": 1.0}, {"policy_loss_sum": 3.0}]) == {"policy_loss": 2.0}


# -- PPO's critic -----------------------------------------------------------------------------------

def test_gae_advantages_use_the_critics_values_and_whiten_over_the_batch():
    values = torch.tensor([[0.5, 0.6, 0.7], [0.2, 0.3, 9.0]])
    inp = _inputs([1.0, 0.0], [0, 1], T=3, mask=[[1, 1, 1], [1, 1, 0]], values=values)
    # token rewards: 1 at (0, 2); 0 at (1, 1). gamma 1, lam 0.5:
    # row 0: deltas [0.1, 0.1, 0.3] -> A = [0.225, 0.25, 0.3]; row 1 ends at t=1: deltas [0.1, -0.3] -> A = [-0.05, -0.3]
    raw = torch.tensor([[0.225, 0.25, 0.3], [-0.05, -0.3, 0.0]])
    assert torch.allclose(ADVANTAGES.get("gae")(inp, gamma=1.0, lam=0.5, whiten=False), raw, atol=1e-6)
    mask = inp.mask.bool()
    whitened = (raw - raw[mask].mean()) / raw[mask].std()
    assert torch.allclose(ADVANTAGES.get("gae")(inp, gamma=1.0, lam=0.5, eps=0.0), whitened * inp.mask, atol=1e-5)
    # the critic's targets are A + V, before whitening
    assert torch.allclose(lambda_returns(inp, gamma=1.0, lam=0.5, whiten=True), (raw + values) * inp.mask, atol=1e-6)
    with pytest.raises(ValueError, match="algo.critic.enabled=true"):
        ADVANTAGES.get("gae")(_inputs([1.0], [0]))


def test_gae_subtracts_the_kl_penalty_token_by_token():
    values = torch.zeros(1, 2)
    inp = _inputs([1.0], [0], T=2, values=values, kl_penalty=torch.tensor([[0.1, 0.2]]))
    # token rewards [-0.1, 0.8]; V = 0, gamma = lam = 1: A_t = returns = [0.7, 0.8]
    assert torch.allclose(ADVANTAGES.get("gae")(inp, gamma=1.0, lam=1.0, whiten=False), torch.tensor([[0.7, 0.8]]), atol=1e-6)


def test_clipped_value_loss_takes_the_pessimistic_branch():
    old = torch.tensor([0.0, 0.0, 0.0, 1.0])
    new = torch.tensor([0.5, 0.1, -0.5, 0.9])
    ret = torch.tensor([1.0, 1.0, 1.0, 0.0])
    # unclipped 0.5 (V - R)^2 = [0.125, 0.405, 1.125, 0.405]
    # clipped (0.2): V_clip = [0.2, 0.1, -0.2, 0.9] -> 0.5 (V_clip - R)^2 = [0.32, 0.405, 0.72, 0.405]
    loss = clipped_value_loss(new, old, ret, clip=0.2)
    assert torch.allclose(loss, torch.tensor([0.32, 0.405, 1.125, 0.405]), atol=1e-6)
    assert torch.allclose(clipped_value_loss(new, old, ret, clip=None), torch.tensor([0.125, 0.405, 1.125, 0.405]), atol=1e-6)
    assert value_clip_fraction(new, old, torch.ones(4), 0.2) == pytest.approx(0.5)


def test_explained_variance():
    returns = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 2.0), returns, mask) == pytest.approx(0.0)
    # residuals [0, 1, -1]: Var = 1 against Var(R) = 1 -> 0; [1, 0, 0] residual var 1/3 -> 2/3
    assert explained_variance(torch.tensor([[0.0, 2.0, 3.0, 0.0]]), returns, mask) == pytest.approx(2 / 3)
    assert math.isnan(explained_variance(returns, torch.ones(1, 4), mask))


# -- estimators ---------------------------------------------------------------------------------------

def test_reinforce_pp_baseline_centres_per_group_then_whitens_over_the_batch():
    # groups {1, 0} and {1, 1}: centred [0.5, -0.5, 0, 0] at the last token, carried back (gamma 1)
    adv = ADVANTAGES.get("reinforce_pp_baseline")(_inputs([1, 0, 1, 1], [0, 0, 1, 1]), eps=0.0)
    returns = torch.tensor([[0.5, 0.5], [-0.5, -0.5], [0.0, 0.0], [0.0, 0.0]])
    assert torch.allclose(adv, (returns - returns.mean()) / returns.std(), atol=1e-6)


def test_grpo_process_places_the_outcome_on_the_final_step():
    # step rewards at t=0 ([1], [0]); outcomes [1, 0] at the last token t=1 become steps too
    inp = _inputs([1.0, 0.0], [0, 0], step_rewards=torch.tensor([[1.0, 0.0], [0.0, 0.0]]),
                  step_mask=torch.tensor([[True, False], [True, False]]))
    adv = ADVANTAGES.get("grpo_process")(inp, eps=0.0, outcome_step=True)
    # four step values [1, 1, 0, 0]: mean 0.5, unbiased std 1/sqrt(3) -> z = +-sqrt(3)/2
    z = math.sqrt(3) / 2
    assert torch.allclose(adv, torch.tensor([[2 * z, z], [-2 * z, -z]]), atol=1e-6)
    # without it, only the steps count: [1, 0] -> z = +-1/sqrt(2), on the tokens up to the step
    plain = ADVANTAGES.get("grpo_process")(inp, eps=0.0)
    assert torch.allclose(plain, torch.tensor([[1 / math.sqrt(2), 0.0], [-1 / math.sqrt(2), 0.0]]), atol=1e-6)


def test_per_test_rewards_with_the_same_span_add_up_on_its_last_token():
    # the code environment gives one step per test, all spanning the whole program
    completion = Completion(0, [1, 2], [3, 4, 5], [0.0] * 3, "def f(x): return x", char_ends=[4, 12, 18])
    verdict = Verdict(reward=0.0, passed=False, steps=tuple(StepReward(0, 18, r, f"test {i}") for i, r in enumerate([1.0, 1.0, 0.0])))
    rewards, mask = place_step_rewards([completion], [verdict], width=4)
    # target index of completion token k is len(prompt) - 1 + k: the program's last token is target 3
    assert rewards.tolist() == [[0.0, 0.0, 0.0, 2.0]] and mask.tolist() == [[False, False, False, True]]
