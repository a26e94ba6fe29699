"""Learned scorers: models trained beside the policy that score every token of a batch.

PRIME's implicit PRM (`rlvr.train.scorers.prm`: token rewards, learned from outcome labels) and
PPO's critic (`rlvr.train.scorers.critic`: values, learned from returns) share one protocol,
`LearnedScorer`: ``score(batch)`` gives ``[B, T]`` scores of a `ScoringBatch`, ``update(batch,
targets, scores)`` takes one optimizer step towards the targets (through the harness's one
accumulation routine), and the weights with their optimizer are ``part``, a
`rlvr.train.trainable.TrainableModel` the harness checkpoints like any component. A recipe builds a
scorer when its algorithm asks for one and never branches on which it is.

`rlvr.train.scorers.reference` is the frozen reference model they (and the policy's KL term) read
against: the policy's starting weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr.train.trainable import TrainableModel


@dataclass
class ScoringBatch:
    """What a learned scorer reads from a rollout batch.

    Attributes:
        tokens: The sequences (prompt + completion).
        rows: The sequences to score and to learn from.
        mask: ``[B, T]`` 1.0 on the tokens that count.
        lengths: ``[B]`` sequence lengths (micro-batches are sorted by them).
        ref_logp: ``[B, T]`` log-probs under the scorer's frozen reference, when it has one (PRIME's PRM).
    """

    tokens: Any
    rows: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    ref_logp: torch.Tensor | None = None


class LearnedScorer(Protocol):
    """A model trained beside the policy that scores every token of a batch: PRIME's implicit
    PRM (token rewards, learned from outcome labels), PPO's critic (values, learned from returns).
    Its weights and optimizer are ``part``, which the harness checkpoints like any component."""

    part: TrainableModel

    def score(self, batch: ScoringBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """``[B, T]`` scores of ``batch.rows`` (0 elsewhere), and statistics."""
        ...

    def update(self, batch: ScoringBatch, targets: torch.Tensor, scores: torch.Tensor | None = None) -> dict[str, float] | None:
        """One optimizer step towards ``targets``; ``scores`` are its own scores of the batch
        before the step (a critic clips its new values around them)."""
        ...


__all__ = ["LearnedScorer", "ScoringBatch"]
