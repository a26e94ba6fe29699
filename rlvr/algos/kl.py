"""KL estimators between the policy and a reference, per token (Schulman, "Approximating KL").

All take ``logp`` (policy) and ``ref_logp`` (reference), both ``[B, T]`` log-probs of the sampled
tokens, and return ``[B, T]``. Samples come from the policy, so each estimates KL(pi || ref).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP

if TYPE_CHECKING:
    from torch import Tensor

KL_ESTIMATORS: Registry = Registry("KL estimator", entry_point_group=ALGOS_GROUP, versioned=False)


@KL_ESTIMATORS.register("k1")
def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``log pi - log ref``: unbiased, high variance, can be negative."""
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``(log pi - log ref)^2 / 2``: biased, low variance, non-negative."""
    return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """``exp(ref - pi) - (ref - pi) - 1``: unbiased, non-negative (GRPO's choice)."""
    d = ref_logp - logp
    return d.exp() - d - 1
