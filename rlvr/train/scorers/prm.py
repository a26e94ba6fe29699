"""PRIME's implicit process reward model: a learned scorer trained online beside the policy.

The PRM ``pi_phi`` is a causal LM read against a frozen reference (its initial weights). It
**scores** every completion token with ``beta * (log pi_phi - log pi_ref)`` and is **updated** with
the cross-entropy of its implicit outcome logit (the summed token rewards) against the verifier's
labels. The math is in `rlvr.algos.prime`; the model, its optimizer and checkpoints are a
`rlvr.train.trainable.TrainableModel`; the optimizer step is the harness's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algos.prime import implicit_outcome_logits, implicit_prm_ce_loss, implicit_process_rewards, prm_accuracy
from rlvr.models.batch import TokenBatch
from rlvr.train.harness import Harness
from rlvr.train.scorers import ScoringBatch
from rlvr.models.scoring import frozen_logprobs
from rlvr.train.trainable import TrainableModel


@dataclass
class PRMObjective:
    """Mean PRIME cross-entropy over the valid sequences of the whole minibatch."""

    model: torch.nn.Module
    batch: TokenBatch
    mask: torch.Tensor  # [B, T]
    labels: torch.Tensor  # [B]
    ref_logp: torch.Tensor  # [B, T]
    beta: float
    device: torch.device

    def totals(self, rows: torch.Tensor) -> torch.Tensor:
        return (self.mask[rows].sum(-1) > 0).sum().float().reshape(1)

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]:
        from rlvr.models.batch import token_logprobs

        sub = self.batch.select(rows).to(self.device)
        width = sub.completion_mask.shape[1]
        m = self.mask[rows, :width].to(self.device)
        logp, _ = token_logprobs(self.model, sub)
        ref = self.ref_logp[rows, :width].to(self.device)
        valid = m.sum(-1) > 0
        per_seq = implicit_prm_ce_loss(logp, ref, m, self.labels[rows].to(self.device), self.beta)
        loss = (per_seq * valid).sum() / totals[0].clamp(min=1)
        logits = implicit_outcome_logits(logp.detach(), ref, m, self.beta)
        n = float(valid.sum())
        # the PRM's prediction before this update, on labels it had not seen: its honest accuracy
        acc = prm_accuracy(logits.cpu(), self.labels[rows], valid.cpu()) if n else 0.0
        return loss, {"accuracy": acc}, n


class ImplicitPRM:
    """A `rlvr.train.scorers.LearnedScorer`: scores are token rewards, targets the verifier's
    outcome labels ``[B]`` (1 = passed); ``ScoringBatch.ref_logp`` must hold the reference's
    log-probs (`reference_logp`, or the policy's reference when they are the same numbers: see
    `reads_like`).

    Args:
        part: The PRM ``pi_phi`` with its optimizer (registered with the harness as ``prm``).
        ref_model: The frozen reference it is read against.
        harness: The run's harness (device, optimizer steps).
        beta: Implicit reward scale.
        micro_batch_size: Sequences per forward/backward.
    """

    def __init__(self, part: TrainableModel, ref_model: torch.nn.Module, harness: Harness, beta: float, micro_batch_size: int):
        self.part, self.ref_model, self.harness = part, ref_model, harness
        self.beta, self.micro_batch_size = beta, micro_batch_size

    @staticmethod
    def reads_like(temperature: float, top_p: float, top_k: int, pack: bool) -> bool:
        """Whether log-probs scored with these sampler settings (`rlvr.models.batch.token_logprobs`)
        are the numbers this PRM reads, so that a reference's can stand in for `reference_logp`:
        the PRM scores the full distribution at temperature 1 (0, greedy, is scored at 1 too),
        untruncated (``top_p < 1`` or ``top_k > 0`` renormalise over the kept mass Z_t, which
        would shift every implicit reward by ``-beta * log Z_t``) and unpacked (packing agrees only
        up to float rounding). Otherwise the PRM's reference scores the batch itself, so a PRM
        equal to its reference gives rewards of exactly 0 under every sampler."""
        return temperature in (0, 1) and top_p >= 1 and top_k == 0 and not pack

    def reference_logp(self, tokens: TokenBatch, rows: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return frozen_logprobs(self.ref_model, tokens, self.harness.micro_batches(rows, self.micro_batch_size, lengths), self.harness.device)

    def score(self, batch: ScoringBatch, labels: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Token rewards ``[B, T]`` of ``batch.rows`` (0 elsewhere); with ``labels``, the PRM's
        ``loss`` and ``accuracy`` on them as it scores."""
        micros = self.harness.micro_batches(batch.rows, self.micro_batch_size, batch.lengths, collective=self.harness.sharded)
        logp = frozen_logprobs(self.part.model, batch.tokens, micros, self.harness.device)
        rewards = implicit_process_rewards(logp, batch.ref_logp, batch.mask, self.beta)
        if labels is None:
            return rewards, {}
        valid = batch.mask.sum(-1) > 0
        logits = implicit_outcome_logits(logp, batch.ref_logp, batch.mask, self.beta)
        loss = implicit_prm_ce_loss(logp, batch.ref_logp, batch.mask, labels, self.beta)
        return rewards, {"accuracy": prm_accuracy(logits, labels, valid), "loss": float((loss * valid).sum() / valid.sum().clamp(min=1))}

    def update(self, batch: ScoringBatch, targets: torch.Tensor, scores: torch.Tensor | None = None) -> dict[str, float]:
        """One optimizer step on the cross-entropy of every valid sequence of all processes against
        the labels ``targets``; its ``loss`` and ``accuracy`` are those before the step."""
        objective = PRMObjective(self.part.model, batch.tokens, batch.mask, targets.float(), batch.ref_logp, self.beta, self.harness.device)
        stats = self.harness.optimizer_step(self.part, batch.rows, objective, self.micro_batch_size, batch.lengths) or {}
        return {k: v for k, v in stats.items() if k in ("loss", "accuracy", "grad_norm")}
