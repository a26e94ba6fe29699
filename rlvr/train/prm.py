"""PRIME's implicit process reward model: a learned scorer trained online beside the policy.

The PRM ``pi_phi`` is a causal LM read against a frozen reference (its initial weights). It
**scores** every completion token with ``beta * (log pi_phi - log pi_ref)`` and is **updated** with
the cross-entropy of its implicit outcome logit (the summed token rewards) against the verifier's
labels. The math is in `rlvr.algos.prime`; the model, its optimizer and checkpoints are a
`rlvr.train.harness.TrainableModel`; the optimizer step is the harness's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlvr.algos.prime import implicit_outcome_logits, implicit_prm_ce_loss, implicit_process_rewards, prm_accuracy
from rlvr.train.batch import TokenBatch
from rlvr.train.harness import Harness, TrainableModel
from rlvr.train.scoring import frozen_logprobs


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
        from rlvr.train.batch import token_logprobs

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
    """Args:
        part: The PRM ``pi_phi`` with its optimizer (registered with the harness as ``prm``).
        ref_model: The frozen reference it is read against.
        harness: The run's harness (device, optimizer steps).
        beta: Implicit reward scale.
        micro_batch_size: Sequences per forward/backward.
    """

    def __init__(self, part: TrainableModel, ref_model: torch.nn.Module, harness: Harness, beta: float, micro_batch_size: int):
        self.part, self.ref_model, self.harness = part, ref_model, harness
        self.beta, self.micro_batch_size = beta, micro_batch_size

    def reference_logp(self, batch: TokenBatch, rows: torch.Tensor) -> torch.Tensor:
        return frozen_logprobs(self.ref_model, batch, rows, self.micro_batch_size, self.harness.device)

    def score(self, batch: TokenBatch, rows: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
              ref_logp: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Token rewards ``[B, T]`` of ``rows`` (0 elsewhere), and the PRM's ``loss`` and ``accuracy``
        on ``labels`` ``[B]`` as it scores them."""
        logp = frozen_logprobs(self.part.model, batch, rows, self.micro_batch_size, self.harness.device)
        valid = mask.sum(-1) > 0
        logits = implicit_outcome_logits(logp, ref_logp, mask, self.beta)
        loss = implicit_prm_ce_loss(logp, ref_logp, mask, labels, self.beta)
        return implicit_process_rewards(logp, ref_logp, mask, self.beta), {
            "accuracy": prm_accuracy(logits, labels, valid), "loss": float((loss * valid).sum() / valid.sum().clamp(min=1))}

    def update(self, batch: TokenBatch, rows: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
               ref_logp: torch.Tensor, lengths: torch.Tensor) -> dict[str, float]:
        """One optimizer step on the cross-entropy of every valid sequence of all processes; its
        ``loss`` and ``accuracy`` are those before the step, ``grad_norm`` of the step."""
        objective = PRMObjective(self.part.model, batch, mask, labels.float(), ref_logp, self.beta, self.harness.device)
        stats = self.harness.optimizer_step(self.part, rows, objective, self.micro_batch_size, lengths) or {}
        return {k: v for k, v in stats.items() if k in ("loss", "accuracy", "grad_norm")}
