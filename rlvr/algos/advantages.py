"""Advantage estimators: rewards of a batch of groups -> token advantages ``[B, T]``.

Shapes: B sequences (groups of completions of the same prompt, identified by ``group_ids``),
T token positions of the completions. ``mask`` is 1 on completion tokens. Sequences with
``valid == False`` (their verification failed and the config drops them) get advantage 0 and do
not enter any group statistic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from envs.registry import Registry

ADVANTAGES: Registry = Registry("advantage estimator", versioned=False)


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
    """

    rewards: Tensor
    group_ids: Tensor
    mask: Tensor
    valid: Tensor
    step_rewards: Tensor | None = None
    step_mask: Tensor | None = None


def group_stats(values: Tensor, group_ids: Tensor, valid: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence group mean, unbiased group std and group size, counting valid members only.

    Returns three ``[B]`` tensors (each sequence gets its group's statistic). A group of one has
    std 0.
    """
    v = valid.to(values.dtype)
    n_groups = int(group_ids.max()) + 1 if group_ids.numel() else 0
    count = torch.zeros(n_groups, dtype=values.dtype).index_add_(0, group_ids, v)
    total = torch.zeros(n_groups, dtype=values.dtype).index_add_(0, group_ids, values * v)
    mean = total / count.clamp(min=1)
    sq = torch.zeros(n_groups, dtype=values.dtype).index_add_(0, group_ids, (values - mean[group_ids]) ** 2 * v)
    std = (sq / (count - 1).clamp(min=1)).sqrt()
    return mean[group_ids], std[group_ids], count[group_ids]


def _zscore(x: Tensor, mean: Tensor, std: Tensor, eps: float) -> Tensor:
    """``(x - mean) / (std + eps)``, and exactly 0 where the group has no spread (also for eps=0)."""
    return torch.where(std > 0, (x - mean) / (std + eps), torch.zeros_like(x))


def _broadcast(per_seq: Tensor, inp: AdvantageInputs) -> Tensor:
    return (per_seq * inp.valid.to(per_seq.dtype)).unsqueeze(1) * inp.mask


@ADVANTAGES.register("grpo")
def grpo_advantages(inp: AdvantageInputs, eps: float = 1e-6) -> Tensor:
    """GRPO: ``(r - mean_group) / (std_group + eps)`` on every token (DeepSeekMath, outcome supervision).

    The std is the unbiased sample std of the group (as TRL and verl compute it); a group whose
    rewards are all equal gets advantage 0. Returns ``[B, T]``.
    """
    mean, std, _ = group_stats(inp.rewards, inp.group_ids, inp.valid)
    return _broadcast(_zscore(inp.rewards, mean, std, eps), inp)


@ADVANTAGES.register("mean_centered")
def mean_centered_advantages(inp: AdvantageInputs) -> Tensor:
    """Dr. GRPO / GPG: ``r - mean_group`` without the std division (removes the difficulty bias). ``[B, T]``."""
    mean, _, _ = group_stats(inp.rewards, inp.group_ids, inp.valid)
    return _broadcast(inp.rewards - mean, inp)


@ADVANTAGES.register("rloo")
def rloo_advantages(inp: AdvantageInputs) -> Tensor:
    """RLOO: ``r_i - mean of the other members``, i.e. ``n/(n-1) * (r_i - mean)``. ``[B, T]``."""
    mean, _, count = group_stats(inp.rewards, inp.group_ids, inp.valid)
    scale = count / (count - 1).clamp(min=1)
    return _broadcast((inp.rewards - mean) * scale * (count > 1), inp)


@ADVANTAGES.register("grpo_process")
def grpo_process_advantages(inp: AdvantageInputs, eps: float = 1e-6, outcome_weight: float = 0.0) -> Tensor:
    """GRPO with process supervision (DeepSeekMath, section 4.1.3).

    Every step reward of every sequence in a group is normalised by the mean and std of all step
    rewards of that group; a token's advantage is the sum of the normalised rewards of the steps
    that end at or after it. ``outcome_weight`` adds that multiple of the outcome advantage
    (`grpo_advantages`), so a sequence with no parseable step still learns from its outcome.
    Returns ``[B, T]``.
    """
    if inp.step_rewards is None or inp.step_mask is None:
        raise ValueError("grpo_process needs step rewards: use an environment that returns Verdict.steps")
    sm = inp.step_mask & inp.valid.unsqueeze(1)
    gid = inp.group_ids.unsqueeze(1).expand_as(sm)[sm]
    vals = inp.step_rewards[sm]
    mean, std, _ = group_stats(vals, gid, torch.ones_like(vals, dtype=torch.bool)) if vals.numel() else (vals, vals, vals)
    normalised = torch.zeros_like(inp.step_rewards)
    normalised[sm] = _zscore(vals, mean, std, eps)
    adv = normalised.flip(-1).cumsum(-1).flip(-1) * inp.mask
    if outcome_weight:
        adv = adv + outcome_weight * grpo_advantages(inp, eps)
    return adv
