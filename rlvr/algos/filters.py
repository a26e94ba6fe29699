"""Which generated groups enter a training batch: DAPO's dynamic sampling drops groups whose
rewards have no spread (all right or all wrong: every advantage would be 0, so the group adds
cost and no signal); PRIME keeps prompts whose accuracy lies in a band. The streaming loop that
refills the batch lives in `rlvr.rollout.sampling`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")


@dataclass(frozen=True)
class GroupFilter:
    """Attributes:
        drop_zero_variance: Drop groups whose valid members all have the same reward.
        accuracy_band: ``(lo, hi)``: keep groups whose pass rate (over valid members) is in
            ``[lo, hi]``; None keeps every pass rate.
    """

    drop_zero_variance: bool = False
    accuracy_band: tuple[float, float] | None = None

    @property
    def active(self) -> bool:
        return self.drop_zero_variance or self.accuracy_band is not None


def zero_variance_groups(rewards: Tensor, valid: Tensor) -> Tensor:
    """``[N]`` bool: groups (rows of ``[N, G]`` rewards) whose valid members' rewards are all
    equal, including groups with fewer than two valid members."""
    big = torch.finfo(rewards.dtype).max
    hi = torch.where(valid, rewards, torch.full_like(rewards, -big)).max(1).values
    lo = torch.where(valid, rewards, torch.full_like(rewards, big)).min(1).values
    return (valid.sum(1) < 2) | (hi == lo)


def keep_groups(rewards: Tensor, passed: Tensor, valid: Tensor, flt: GroupFilter) -> Tensor:
    """``[N]`` bool: which groups to train on.

    Args:
        rewards: ``[N, G]`` the verifier's outcome reward of each completion.
        passed: ``[N, G]`` bool, the verifier's pass/fail.
        valid: ``[N, G]`` bool, verdicts that count (failed verifications are left out).
        flt: The filter.
    """
    keep = torch.ones(rewards.shape[0], dtype=torch.bool, device=rewards.device)
    if flt.drop_zero_variance:
        keep &= ~zero_variance_groups(rewards, valid)
    if flt.accuracy_band is not None:
        lo, hi = flt.accuracy_band
        n = valid.sum(1)
        acc = (passed & valid).sum(1).to(torch.float32) / n.clamp(min=1)
        keep &= (n > 0) & (acc >= lo - 1e-9) & (acc <= hi + 1e-9)
    return keep
