"""Loss aggregation: a ``[B, T]`` token loss -> one scalar.

Every mode divides by a normaliser computed over the WHOLE optimizer batch (all micro-batches,
all processes), passed in as `Normalizer`; a micro-batch contributes its share of the sum. So the
gradient is identical however the batch is split into micro-batches, accumulation steps or
processes.

``mask`` is the loss mask (generated tokens of the sequences in the loss). A token that a mismatch
correction rejects (MIS) stays in it with a loss of 0, in every mode: it counts in token_mean's
denominator, in its sequence's token count, and a fully rejected sequence still counts in the
sequence mean (`rlvr.algos.objective.ObjectiveInputs.keep`). So the normalisers are fixed before
any forward (the trainer's log-probs, which decide the rejection, need one), and rejection acts
as a weight of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from envs.registry import Registry
from rlvr.algos.parts import ALGOS_GROUP
from rlvr.lazy import lazy_module

if TYPE_CHECKING:
    import torch
    from torch import Tensor
else:
    torch = lazy_module("torch")

AGGREGATIONS: Registry = Registry("loss aggregation", entry_point_group=ALGOS_GROUP, versioned=False)


@dataclass(frozen=True)
class Normalizer:
    """Totals over the whole optimizer batch.

    Attributes:
        sequences: Number of (valid) sequences.
        tokens: Number of completion tokens.
        max_len: The constant length Dr. GRPO divides by (the configured max completion length,
            not the padded width of a micro-batch).
    """

    sequences: float
    tokens: float
    max_len: float


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(loss: Tensor, mask: Tensor, norm: Normalizer) -> Tensor:
    """GRPO: mean over each sequence's tokens, then mean over sequences."""
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.sum() / max(norm.sequences, 1.0)


@AGGREGATIONS.register("token_mean")
def token_mean(loss: Tensor, mask: Tensor, norm: Normalizer) -> Tensor:
    """DAPO: mean over every token of the batch (long sequences weigh more)."""
    return (loss * mask).sum() / max(norm.tokens, 1.0)


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, norm: Normalizer) -> Tensor:
    """Dr. GRPO: token sum divided by a constant max length, then mean over sequences."""
    return (loss * mask).sum() / (max(norm.max_len, 1.0) * max(norm.sequences, 1.0))


@AGGREGATIONS.register("seq_mean")
def seq_mean(loss: Tensor, mask: Tensor, norm: Normalizer) -> Tensor:
    """GSPO: the loss is per sequence (identical on each of its tokens); mean over sequences."""
    has_tokens = mask.sum(-1) > 0
    first = torch.where(has_tokens, (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1), torch.zeros_like(loss[:, 0]))
    return first.sum() / max(norm.sequences, 1.0)
