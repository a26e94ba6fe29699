"""The clipped policy surrogate, per token.

``loss_t = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)`` (PPO), with optional dual
clipping for negative advantages (``max(., c A_t)``, Ye et al. 2020), or ``-A_t log pi_t`` when
there is no ratio (GPG). Returns the ``[B, T]`` token loss and statistics for logging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class PolicyLossInputs:
    """Shapes ``[B, T]``.

    Attributes:
        logp: Log-probs of the sampled tokens under the current policy (with grad).
        old_logp: The same under the policy that generated them (no grad).
        advantages: Token advantages.
        mask: 1.0 on completion tokens of valid sequences.
    """

    logp: Tensor
    old_logp: Tensor
    advantages: Tensor
    mask: Tensor


def clipped_surrogate(
    ratio: Tensor | None, inp: PolicyLossInputs, clip_low: float | None, clip_high: float | None, dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Token loss ``[B, T]`` and ``{clip_frac_low, clip_frac_high, ratio_mean, ratio_min, ratio_max}``.

    ``clip_low``/``clip_high`` are the epsilons (``None`` = no clipping on that side);
    ``dual_clip`` is the constant c > 1 bounding the loss of negative advantages.
    """
    adv, mask = inp.advantages, inp.mask
    if ratio is None:
        return -adv * inp.logp, {}
    lo = 1.0 - clip_low if clip_low is not None else 0.0
    hi = 1.0 + clip_high if clip_high is not None else float("inf")
    unclipped = ratio * adv
    clipped = ratio.clamp(lo, hi) * adv
    loss = -torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        r = ratio.detach()
        stats = {
            # a token is clipped when the clipped branch is the active one
            "clip_frac_low": float(((r < lo) & (adv < 0)).float().mul(mask).sum() / n),
            "clip_frac_high": float(((r > hi) & (adv > 0)).float().mul(mask).sum() / n),
            "ratio_mean": float((r * mask).sum() / n),
            "ratio_min": float(r.masked_fill(mask == 0, float("inf")).min()) if mask.any() else 1.0,
            "ratio_max": float(r.masked_fill(mask == 0, float("-inf")).max()) if mask.any() else 1.0,
        }
    return loss, stats
