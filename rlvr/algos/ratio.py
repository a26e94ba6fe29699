"""Importance ratios pi_theta / pi_old. All take ``logp``, ``old_logp`` and ``mask`` ``[B, T]``
and return a ``[B, T]`` ratio (the plain policy gradient, `rlvr.algos.objective` ``pg``, ignores it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP

if TYPE_CHECKING:
    from torch import Tensor

RATIOS: Registry = Registry("importance ratio", entry_point_group=ALGOS_GROUP, versioned=False)


def _seq_mean_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]


@RATIOS.register("token")
def token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """PPO/GRPO: ``exp(logp_t - old_logp_t)`` per token."""
    return (logp - old_logp).exp()


@RATIOS.register("sequence")
def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO: ``exp(mean_t(logp - old_logp))``, the length-normalised sequence ratio, on every token."""
    return _seq_mean_log_ratio(logp, old_logp, mask).exp().unsqueeze(1).expand_as(logp)


@RATIOS.register("sequence_token")
def sequence_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO-token: ``sg[s_i] * pi_t / sg[pi_t]``. Equal in value to the sequence ratio, but its
    gradient flows through each token separately (so token-level advantages can be used)."""
    s = _seq_mean_log_ratio(logp, old_logp, mask).exp().detach().unsqueeze(1)
    return s * (logp - logp.detach()).exp()
