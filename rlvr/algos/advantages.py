"""Advantage estimators: rewards of a batch of groups -> token advantages ``[B, T]``.

Shapes: B sequences (groups of completions of the same prompt, identified by ``group_ids``),
T token positions of the completions. ``mask`` is 1 on completion tokens. Sequences with
``valid == False`` (their verification failed and the config drops them) get advantage 0 and do
not enter any group statistic.

Two families:

- group estimators (``grpo``, ``mean_centered``, ``rloo``) score a whole sequence against the
  other members of its group and put that one number on every token;
- return estimators (``reinforce_pp``, ``prime``, and `gae` for a critic) see rewards per token
  (the outcome at the last token, a per-token KL penalty, dense process rewards) and give each
  token the (discounted) sum of the rewards from it to the end.

Discounting (``gamma < 1``) is per generated token: positions off ``mask`` (the observation
tokens of a multi-turn episode, which the environment wrote) neither discount nor accrue, so an
episode's generated tokens get the advantages they would get with its observations cut out, in
every estimator (`discounted_returns`, `gae`).

Groups always live on one process; statistics over the whole batch (``reinforce_pp``, ``prime``
with ``whiten``) are summed over processes through ``AdvantageInputs.reduce_sum``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP, argument_bounds
from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")

ADVANTAGES: Registry = Registry("advantage estimator", entry_point_group=ALGOS_GROUP, versioned=False)


@dataclass
class AdvantageInputs:
    """Everything an estimator may use.

    Attributes:
        rewards: ``[B]`` outcome reward per sequence.
        group_ids: ``[B]`` long, which group (prompt) each sequence belongs to, 0..G-1.
        mask: ``[B, T]`` 1.0 on completion tokens.
        valid: ``[B]`` bool, sequences that count (see module docstring).
        step_rewards: ``[B, T]`` process rewards, each placed at the last token of its step.
        step_mask: ``[B, T]`` bool, True where ``step_rewards`` holds a step's reward.
        kl_penalty: ``[B, T]`` ``beta * KL_t`` per token when the KL is a reward penalty
            (``algo.kl.mode=reward``). Group estimators subtract its sum from the sequence reward;
            return estimators subtract it token by token (REINFORCE++, PPO).
        token_rewards: ``[B, T]`` dense process rewards on every completion token (PRIME's
            implicit PRM: ``beta * (log pi_phi - log pi_ref)``).
        values: ``[B, T]`` a critic's value of the state before each completion token (GAE).
        reduce_sum: Sums a tensor over all processes (identity on one process); batch-level
            statistics go through it so they cover the whole batch, not one process's share.
    """

    rewards: Tensor
    group_ids: Tensor
    mask: Tensor
    valid: Tensor
    step_rewards: Tensor | None = None
    step_mask: Tensor | None = None
    kl_penalty: Tensor | None = None
    token_rewards: Tensor | None = None
    values: Tensor | None = None
    reduce_sum: Callable[[Tensor], Tensor] | None = None

    @property
    def valid_mask(self) -> Tensor:
        """``[B, T]`` ``mask`` restricted to valid sequences."""
        return self.mask * self.valid.to(self.mask.dtype).unsqueeze(1)

    def sequence_rewards(self) -> Tensor:
        """``[B]`` outcome reward minus the summed KL penalty (if any)."""
        if self.kl_penalty is None:
            return self.rewards
        return self.rewards - (self.kl_penalty * self.mask).sum(-1)

    def outcome_token_rewards(self) -> Tensor:
        """``[B, T]`` the outcome reward at each sequence's last token, minus the per-token KL penalty."""
        out = last_token_mask(self.mask).to(self.rewards.dtype) * self.rewards.unsqueeze(1)
        if self.kl_penalty is not None:
            out = out - self.kl_penalty * self.mask
        return out * self.valid.to(out.dtype).unsqueeze(1)


def group_stats(values: Tensor, group_ids: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence group mean, unbiased group std and group size, counting valid members only.

    Returns three ``[B]`` tensors (each sequence gets its group's statistic). A group of one has
    std 0.
    """
    v = valid.to(values.dtype)
    n_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    count = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, v)
    total = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, values * v)
    mean = total / count.clamp(min=1)
    sq = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, (values - mean[group_ids]) ** 2 * v)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], count[group_ids]


def leave_one_out_mean(values: Tensor, group_ids: Tensor, valid: Tensor) -> Tensor:
    """``[B]``: for each sequence, the mean of ``values`` over the OTHER valid members of its group
    (0 when it has none)."""
    v = valid.to(values.dtype)
    n_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    count = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, v)[group_ids]
    total = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, group_ids, values * v)[group_ids]
    others = count - v
    return torch.where(others > 0, (total - values * v) / others.clamp(min=1), torch.zeros_like(values))


def last_token_mask(mask: Tensor) -> Tensor:
    """``[B, T]`` bool, True at the last position where ``mask`` is set (nowhere for an empty row)."""
    T = mask.shape[1]
    positions = torch.arange(T, device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(-1).values
    return (positions == last.unsqueeze(1)) & (last.unsqueeze(1) >= 0)


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """``[B, T]`` returns ``G_t = sum_{s >= t, s masked} gamma^(k(s) - k(t)) c_s`` of token rewards
    ``c`` ``[B, T]``, where ``k(t)`` counts the masked positions before ``t``: the discount is per
    generated token, so observation tokens of an episode (mask 0) neither discount nor accrue, as
    in `gae`. 0 off the mask."""
    m = mask > 0
    c = rewards * mask
    out = torch.zeros_like(c)
    running = torch.zeros_like(c[:, 0])
    for t in range(c.shape[1] - 1, -1, -1):
        running = torch.where(m[:, t], c[:, t] + gamma * running, running)  # off the mask: carried over unchanged
        out[:, t] = running
    return out * mask


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8, reduce_sum: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` with the mean and the unbiased variance over the masked
    entries of the whole batch (all processes when ``reduce_sum`` is given); 0 off the mask."""
    m = mask.to(x.dtype)
    totals = torch.stack([m.sum(), (x * m).sum()])
    if reduce_sum is not None:
        totals = reduce_sum(totals)
    n, mean = totals[0], totals[1] / totals[0].clamp(min=1)
    sq = ((x - mean) ** 2 * m).sum()
    if reduce_sum is not None:
        sq = reduce_sum(sq)
    var = sq / (n - 1).clamp(min=1)
    return (x - mean) * torch.rsqrt(var + eps) * m


def _zscore(x: Tensor, mean: Tensor, std: Tensor, eps: float) -> Tensor:
    """``(x - mean) / (std + eps)``, and exactly 0 where the group has no spread (also for eps=0)."""
    return torch.where(std > 0, (x - mean) / (std + eps), torch.zeros_like(x))


def _broadcast(per_seq: Tensor, inp: AdvantageInputs) -> Tensor:
    return (per_seq * inp.valid.to(per_seq.dtype)).unsqueeze(1) * inp.mask


@ADVANTAGES.register("grpo")
@argument_bounds(eps={"gt": 0})
def grpo_advantages(inp: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """GRPO: ``(r - mean_group) / (std_group + eps)`` on every token (DeepSeekMath, outcome supervision).

    The std is the unbiased sample std of the group (as TRL and verl compute it); a group whose
    rewards are all equal gets advantage 0. Returns ``[B, T]``.
    """
    r = inp.sequence_rewards()
    mean, std, _ = group_stats(r, inp.group_ids, inp.valid)
    return _broadcast(_zscore(r, mean, std, eps), inp)


@ADVANTAGES.register("mean_centered")
def mean_centered_advantages(inp: AdvantageInputs) -> Tensor:
    """Dr. GRPO / GPG: ``r - mean_group`` without the std division (removes the difficulty bias). ``[B, T]``."""
    r = inp.sequence_rewards()
    mean, _, _ = group_stats(r, inp.group_ids, inp.valid)
    return _broadcast(r - mean, inp)


@ADVANTAGES.register("rloo")
def rloo_advantages(inp: AdvantageInputs) -> Tensor:
    """RLOO: ``r_i - mean of the other members``, i.e. ``n/(n-1) * (r_i - mean)``. ``[B, T]``."""
    r = inp.sequence_rewards()
    _, _, count = group_stats(r, inp.group_ids, inp.valid)
    adv = r - leave_one_out_mean(r, inp.group_ids, inp.valid)
    return _broadcast(adv * (count > 1), inp)  # a group of one has no baseline: no signal


@ADVANTAGES.register("grpo_process")
@argument_bounds(eps={"gt": 0}, outcome_weight={"ge": 0})  # a negative weight would push away from right answers
def grpo_process_advantages(inp: AdvantageInputs, eps: float = 1e-6, outcome_weight: float = 0.0, outcome_step: bool = False) -> Tensor:
    """GRPO with process supervision (DeepSeekMath, section 4.1.3).

    Every step reward of every sequence in a group is normalised by the mean and std of all step
    rewards of that group; a token's advantage is the sum of the normalised rewards of the steps
    that end at or after it. With ``outcome_step`` the outcome reward is the final step's, at the
    last token (added to a step that ends there), so the answer itself is supervised and a
    sequence without parseable steps still has one. ``outcome_weight`` adds that multiple of the
    outcome advantage (`grpo_advantages`) on every token. Returns ``[B, T]``.
    """
    if inp.step_rewards is None or inp.step_mask is None:
        raise ValueError("grpo_process needs step rewards: use an environment that returns Verdict.steps")
    step_rewards, step_mask = inp.step_rewards, inp.step_mask
    if outcome_step:
        last = last_token_mask(inp.mask)
        step_rewards = step_rewards + last.to(step_rewards.dtype) * inp.rewards.unsqueeze(1)
        step_mask = step_mask | last
    sm = step_mask & inp.valid.unsqueeze(1)
    gid = inp.group_ids.unsqueeze(1).expand_as(sm)[sm]
    vals = step_rewards[sm]
    mean, std, _ = group_stats(vals, gid, torch.ones_like(vals, dtype=torch.bool)) if vals.numel() else (vals, vals, vals)
    normalised = torch.zeros_like(step_rewards)
    normalised[sm] = _zscore(vals, mean, std, eps)
    adv = normalised.flip(-1).cumsum(-1).flip(-1) * inp.mask
    if outcome_weight:
        adv = adv + outcome_weight * grpo_advantages(inp, eps)
    return adv


@ADVANTAGES.register("reinforce_pp")
@argument_bounds(gamma={"ge": 0, "le": 1}, eps={"gt": 0})
def reinforce_pp_advantages(inp: AdvantageInputs, gamma: float = 1.0, eps: float = 1e-8) -> Tensor:
    """REINFORCE++ (Hu 2025): token rewards are the outcome at the last token minus the per-token
    KL penalty ``beta * KL_t`` (k1, ``algo.kl.mode=reward``); each token's return is the discounted sum
    of the rewards from it to the end (discounted per generated token, `discounted_returns`); the returns are whitened with the mean and unbiased std of
    every valid token of the whole batch (no per-group baseline). Returns ``[B, T]``."""
    mask = inp.valid_mask
    returns = discounted_returns(inp.outcome_token_rewards(), mask, gamma)
    return masked_whiten(returns, mask, eps, inp.reduce_sum)


@ADVANTAGES.register("reinforce_pp_baseline")
@argument_bounds(gamma={"ge": 0, "le": 1}, eps={"gt": 0})
def reinforce_pp_baseline_advantages(inp: AdvantageInputs, gamma: float = 1.0, eps: float = 1e-8) -> Tensor:
    """REINFORCE++-baseline (Hu et al. 2025): the outcome minus its group's mean at the last token
    (a per-prompt baseline, so easy and hard prompts contribute alike), any per-token KL penalty
    subtracted, turned into returns, then whitened over every valid token of the whole batch
    (all processes). Returns ``[B, T]``."""
    mask = inp.valid_mask
    mean, _, _ = group_stats(inp.rewards, inp.group_ids, inp.valid)
    centred = dataclasses.replace(inp, rewards=inp.rewards - mean)
    returns = discounted_returns(centred.outcome_token_rewards(), mask, gamma)
    return masked_whiten(returns, mask, eps, inp.reduce_sum)


@ADVANTAGES.register("prime")
def prime_advantages(inp: AdvantageInputs, outcome_coef: float = 5.0, implicit_coef: float = 5.0, verifier_coef: float = 0.0,
                     gamma: float = 1.0, whiten: bool = True, eps: float = 1e-8) -> Tensor:
    """PRIME (Cui et al. 2025): leave-one-out baselines for each reward source, weighted, summed,
    turned into returns.

    For sequence i of a group of K valid sequences:

    - outcome: ``r_o(i) - mean_{j != i} r_o(j)`` at the last token (RLOO), times ``outcome_coef``;
    - implicit process rewards ``r_t(i)`` (``AdvantageInputs.token_rewards``, on every token):
      ``r_t(i) - mean_{j != i} rbar(j)`` where ``rbar(j)`` is the mean token reward of sequence j,
      times ``implicit_coef``;
    - the verifier's own process rewards (``step_rewards`` at the last token of each step): the
      same with the mean step reward of the others (sequences without steps are left out of the
      baseline), times ``verifier_coef``;
    - a KL penalty (``algo.kl.mode=reward``) is subtracted token by token.

    The token reward sum is turned into returns ``sum_{s >= t} gamma^(s-t) c_s`` (`discounted_returns`:
    ``s - t`` counts generated tokens only); ``whiten``
    normalises them over the whole batch (as the reference implementation does), so the
    coefficients set the sources' relative weight. Returns ``[B, T]``.
    """
    mask = inp.valid_mask
    c = torch.zeros_like(mask)
    if outcome_coef:
        r = inp.rewards
        c = c + outcome_coef * last_token_mask(mask) * (r - leave_one_out_mean(r, inp.group_ids, inp.valid)).unsqueeze(1)
    if implicit_coef:
        if inp.token_rewards is None:
            raise ValueError("prime with implicit_coef != 0 needs implicit process rewards: set algo.implicit_prm=true (or implicit_coef=0)")
        per_seq = (inp.token_rewards * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        baseline = leave_one_out_mean(per_seq, inp.group_ids, inp.valid)
        c = c + implicit_coef * (inp.token_rewards - baseline.unsqueeze(1)) * mask
    if verifier_coef:
        if inp.step_rewards is None or inp.step_mask is None:
            raise ValueError("prime with verifier_coef != 0 needs step rewards: use an environment that returns Verdict.steps")
        sm = inp.step_mask.to(mask.dtype) * mask
        n_steps = sm.sum(-1)
        has_steps = inp.valid & (n_steps > 0)
        per_seq = (inp.step_rewards * sm).sum(-1) / n_steps.clamp(min=1)
        baseline = leave_one_out_mean(per_seq, inp.group_ids, has_steps)
        c = c + verifier_coef * (inp.step_rewards - baseline.unsqueeze(1)) * sm
    if inp.kl_penalty is not None:
        c = c - inp.kl_penalty * mask
    returns = discounted_returns(c, mask, gamma)
    return masked_whiten(returns, mask, eps, inp.reduce_sum) if whiten else returns


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) for a learned critic (the PPO baseline).

    ``delta_t = c_t + gamma * V_{t+1} - V_t`` and ``A_t = delta_t + gamma * lam * A_{t+1}``, with
    ``V`` after a sequence's last masked token taken as 0 (the episode ends there).

    Args:
        rewards: ``[B, T]`` token rewards (outcome at the last token, minus any KL penalty).
        values: ``[B, T]`` the critic's value of the state before each token.
        mask: ``[B, T]`` 1 on generated tokens; a gap (an episode's observation tokens) is part of
            the transition between the tokens either side of it: no discount, no reward, no value.

    Returns:
        ``(advantages, returns)``, both ``[B, T]`` and 0 off the mask; ``returns = A + V`` are the
        critic's regression targets.
    """
    m = mask.to(values.dtype)
    v = values * m
    adv = torch.zeros_like(v)
    next_value = torch.zeros_like(v[:, 0])
    next_adv = torch.zeros_like(v[:, 0])
    for t in range(v.shape[1] - 1, -1, -1):
        delta = rewards[:, t] * m[:, t] + gamma * next_value - v[:, t]
        a = (delta + gamma * lam * next_adv) * m[:, t]
        adv[:, t] = a
        next_value = torch.where(m[:, t] > 0, v[:, t], next_value)
        next_adv = torch.where(m[:, t] > 0, a, next_adv)
    return adv, (adv + v) * m


@ADVANTAGES.register("gae")
@argument_bounds(gamma={"ge": 0, "le": 1}, lam={"ge": 0, "le": 1}, eps={"gt": 0})
def gae_advantages(inp: AdvantageInputs, gamma: float = 1.0, lam: float = 0.95, whiten: bool = True, eps: float = 1e-8) -> Tensor:
    """PPO's advantages: `gae` over the token rewards (the outcome at the last token minus any
    per-token KL penalty) and the critic's ``values``, whitened over every valid token of the batch
    (all processes) when ``whiten``. The critic's targets are `lambda_returns` of the same inputs.
    Returns ``[B, T]``."""
    if inp.values is None:
        raise ValueError("gae needs a critic's values: set algo.critic.enabled=true")
    adv, _ = gae(inp.outcome_token_rewards(), inp.values, inp.valid_mask, gamma, lam)
    return masked_whiten(adv, inp.valid_mask, eps, inp.reduce_sum) if whiten else adv


def lambda_returns(inp: AdvantageInputs, gamma: float = 1.0, lam: float = 0.95, **_: object) -> Tensor:
    """``[B, T]`` the critic's regression targets for `gae_advantages`: ``A^GAE + V`` before any
    whitening (extra estimator arguments such as ``whiten`` are accepted and ignored)."""
    if inp.values is None:
        raise ValueError("lambda returns need a critic's values")
    return gae(inp.outcome_token_rewards(), inp.values, inp.valid_mask, gamma, lam)[1]


def estimator_parameters(name: str) -> dict[str, inspect.Parameter]:
    """The keyword arguments (the ``algo.advantage`` section's arguments) a registered estimator accepts, with defaults."""
    params = inspect.signature(ADVANTAGES.get(name)).parameters
    return {k: p for k, p in list(params.items())[1:]}
