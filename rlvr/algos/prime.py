"""PRIME's implicit process reward model (Cui et al. 2025), as tensor functions.

The PRM is a causal LM ``pi_phi`` (initialised from the policy's starting weights) read against a
frozen reference ``pi_ref`` (the same starting weights). Its reward for token t is
``beta * (log pi_phi(y_t | y_<t) - log pi_ref(y_t | y_<t))``; the sum over a completion is the
logit of the PRM's belief that the completion is correct, trained with cross-entropy on the
verifier's outcome labels. All inputs are ``[B, T]`` log-probs of the sampled tokens in target
space and a ``[B, T]`` completion mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    import torch.nn.functional as F
    from torch import Tensor
else:
    torch = lazy_module("torch")
    F = lazy_module("torch.nn.functional")


def implicit_process_rewards(logp_phi: Tensor, logp_ref: Tensor, mask: Tensor, beta: float) -> Tensor:
    """``[B, T]`` token rewards ``beta * (log pi_phi - log pi_ref)``, 0 off the mask."""
    return beta * (logp_phi - logp_ref) * mask


def implicit_outcome_logits(logp_phi: Tensor, logp_ref: Tensor, mask: Tensor, beta: float) -> Tensor:
    """``[B]`` the sequence-level implicit reward ``beta * sum_t (log pi_phi - log pi_ref)``: the
    PRM's logit that the completion is correct."""
    return implicit_process_rewards(logp_phi, logp_ref, mask, beta).sum(-1)


def implicit_prm_ce_loss(logp_phi: Tensor, logp_ref: Tensor, mask: Tensor, labels: Tensor, beta: float) -> Tensor:
    """``[B]`` PRIME's cross-entropy loss per sequence:
    ``-(y log sigmoid(z) + (1 - y) log(1 - sigmoid(z)))`` with ``z`` = `implicit_outcome_logits`
    and ``y`` = ``labels`` ``[B]`` in [0, 1] (the verifier's outcome). Aggregate with a global
    sequence count so micro-batching does not change the gradient."""
    z = implicit_outcome_logits(logp_phi, logp_ref, mask, beta)
    return F.binary_cross_entropy_with_logits(z, labels.to(z.dtype), reduction="none")


def prm_accuracy(logits: Tensor, labels: Tensor, valid: Tensor) -> float:
    """Share of valid sequences whose implicit outcome logit has the label's sign (>0 for 1)."""
    v = valid.bool()
    if not v.any():
        return float("nan")
    return float(((logits[v] > 0) == (labels[v] > 0.5)).to(torch.float32).mean())
