"""The critic's loss and diagnostics (PPO with a learned value model).

All inputs are ``[B, T]`` in target space: ``values`` the critic's current estimates of the state
before each completion token, ``old_values`` its estimates when the batch was scored (no grad),
``returns`` the regression targets (`rlvr.algos.advantages.lambda_returns`), ``mask`` 1.0 where a
token counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")


def clipped_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None) -> Tensor:
    """``[B, T]`` PPO's value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)`` with
    ``V_clip = old + clamp(V - old, -clip, clip)``, or ``0.5 * (V - R)^2`` when ``clip`` is None.
    The max makes clipping pessimistic: a step that moves a value far from its old estimate is not
    rewarded for it (Schulman et al. 2017's PPO2 implementation)."""
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped
    clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped)


def value_clip_fraction(values: Tensor, old_values: Tensor, mask: Tensor, clip: float | None) -> float:
    """Share of masked tokens whose new value moved more than ``clip`` from the old one."""
    if clip is None:
        return 0.0
    moved = ((values - old_values).abs() > clip).to(mask.dtype)
    return float((moved * mask).sum() / mask.sum().clamp(min=1))


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """``1 - Var(R - V) / Var(R)`` over the masked tokens: 1 for a perfect critic, 0 for one that
    predicts the mean, negative for one worse than that (NaN when the returns do not vary)."""
    m = mask.bool()
    r, v = returns[m].double(), values[m].double()
    if r.numel() < 2:
        return float("nan")
    var_r = r.var()
    if var_r == 0:
        return float("nan")
    return float(1 - (r - v).var() / var_r)
