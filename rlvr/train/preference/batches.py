"""The preference recipe's batches and their objectives: `PairBatch` (P pairs, DPO and its
variants) with `PairObjective`, `LabelledBatch` (single completions labelled desirable or not, KTO)
with `LabelledObjective`, and `sequence_logps` (summed completion log-probs under a model that is not
trained: the reference, and the policy for KTO's reference point)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from rlvr.algos.preference import PAIR_STATS, UNPAIRED_STATS, LossParams, PreferenceLoss, SequenceLogps, pair_objective, unpaired_objective
from rlvr.models.batch import TokenBatch, build_token_batch, token_logprobs
from rlvr.train.harness import Harness
from rlvr.models.scoring import frozen_logprobs


def sequence_logps(model: torch.nn.Module, batch: TokenBatch, harness: Harness, micro_batch_size: int, rows: torch.Tensor | None = None,
                   collective: bool = False) -> torch.Tensor:
    """``[B]`` summed log-probs of the completions of ``rows`` (default: all; 0 elsewhere) under a
    model that is not being trained, in micro-batches of similar length. ``collective``: the model
    is sharded, so every process joins as many forwards (`Harness.micro_batches`)."""
    rows = torch.arange(batch.input_ids.shape[0]) if rows is None else rows
    micros = harness.micro_batches(rows, micro_batch_size, batch.attention_mask.sum(-1), collective)
    return (frozen_logprobs(model, batch, micros, harness.device) * batch.completion_mask).sum(-1)


@dataclass
class PairBatch:
    """P pairs as one right-padded batch: chosen sequences in rows ``0..P-1``, rejected ones in
    rows ``P..2P-1``; ``ref`` ``[2P]`` their reference log-probs. Rows of the optimizer step are pairs."""

    tokens: TokenBatch
    ref: torch.Tensor
    sequences_per_row: ClassVar[int] = 2  # a pair is a chosen and a rejected sequence
    stats: ClassVar[tuple[str, ...]] = PAIR_STATS  # the objective's whole-batch means

    @classmethod
    def build(cls, prompts: list[list[int]], chosen: list[list[int]], rejected: list[list[int]], pad_id: int,
              loss_masks: list[list[int] | None] | None = None) -> PairBatch:
        """``loss_masks``: chosen then rejected, as `build_token_batch` takes them (episodes' observations)."""
        return cls(build_token_batch(prompts + prompts, chosen + rejected, pad_id, loss_masks), torch.zeros(2 * len(prompts)))

    @property
    def size(self) -> int:
        return len(self.ref) // 2

    @property
    def lengths(self) -> torch.Tensor:
        """``[P]`` the longer sequence of each pair (micro-batches are sorted by it)."""
        n = self.tokens.attention_mask.sum(-1)
        return torch.maximum(n[: self.size], n[self.size:])


@dataclass
class PairObjective:
    """`rlvr.algos.preference.pair_objective` over micro-batches of pairs: one forward of the
    chosen and rejected sequences of the micro-batch's pairs."""

    model: torch.nn.Module
    batch: PairBatch
    loss_fn: PreferenceLoss
    params: LossParams
    length_norm: bool
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.tensor([float(len(rows))])

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        k, seq = len(rows), torch.cat([rows, rows + self.batch.size])
        sums, tokens = _policy_logps(self.model, self.batch.tokens.select(seq).to(self.device))
        ref = self.batch.ref[seq].to(self.device)
        loss, stats = pair_objective(SequenceLogps(sums[:k], ref[:k], tokens[:k]), SequenceLogps(sums[k:], ref[k:], tokens[k:]),
                                     self.loss_fn, self.params, self.length_norm, float(totals[0]))
        return loss, stats, float(k)


@dataclass
class LabelledBatch:
    """N completions labelled desirable (passed) or undesirable, with the mismatched sequences of
    KTO's reference point: row ``i``'s prompt followed by the completion of row ``partner[i]``."""

    tokens: TokenBatch
    ref: torch.Tensor  # [N]
    desirable: torch.Tensor  # [N] bool
    mismatched: TokenBatch | None  # None when every completion answers the same prompt
    mismatched_ref: torch.Tensor | None  # [N]
    sequences_per_row: ClassVar[int] = 1
    stats: ClassVar[tuple[str, ...]] = UNPAIRED_STATS

    @property
    def size(self) -> int:
        return len(self.ref)

    @property
    def lengths(self) -> torch.Tensor:
        return self.tokens.attention_mask.sum(-1)


@dataclass
class LabelledObjective:
    """`rlvr.algos.preference.unpaired_objective` over micro-batches of labelled completions,
    with the minibatch's reference point ``z_ref`` (a constant)."""

    model: torch.nn.Module
    batch: LabelledBatch
    z_ref: float
    loss_fn: PreferenceLoss
    params: LossParams
    length_norm: bool
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        d = self.batch.desirable[rows]
        return torch.tensor([float(len(rows)), float(d.sum()), float((~d).sum())])

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        sums, tokens = _policy_logps(self.model, self.batch.tokens.select(rows).to(self.device))
        seqs = SequenceLogps(sums, self.batch.ref[rows].to(self.device), tokens)
        loss, stats = unpaired_objective(seqs, self.batch.desirable[rows].to(self.device), self.z_ref, self.loss_fn, self.params,
                                         self.length_norm, totals)
        return loss, stats, float(len(rows))


def _policy_logps(model: torch.nn.Module, sub: TokenBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B]`` summed completion log-probs (with grad) and completion lengths of a micro-batch."""
    logp, _ = token_logprobs(model, sub)
    m = sub.completion_mask
    return (logp * m).sum(-1), m.sum(-1)


__all__ = ["LabelledBatch", "LabelledObjective", "PairBatch", "PairObjective", "sequence_logps"]
