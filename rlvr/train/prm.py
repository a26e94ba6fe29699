"""PRIME's implicit process reward model, trained online beside the policy.

Each step, on the step's rollouts: compute the PRM's log-probs and the reference's, update the PRM
with the cross-entropy of its implicit outcome logit against the verifier's labels (PRIME: before
scoring, so the rewards come from a PRM that has seen this batch's labels), then score every
completion token with ``beta * (log pi_phi - log pi_ref)``. The math is in `rlvr.algos.prime`;
this module owns the model, its optimizer, micro-batching and checkpoints.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.algos.prime import implicit_outcome_logits, implicit_prm_ce_loss, implicit_process_rewards, prm_accuracy
from rlvr.train.batch import TokenBatch, token_logprobs

OPTIMIZER_FILE = "prm_optimizer.pt"


class ImplicitPRM:
    """Args:
        model: The PRM ``pi_phi``, a causal LM (already prepared by accelerate if distributed).
        ref_model: The frozen reference it is read against (its initial weights).
        optimizer: The PRM's optimizer (prepared likewise).
        accelerator: The run's accelerator (device, backward, gradient sync).
        beta: Implicit reward scale.
        update: ``"before"`` scoring, ``"after"``, or ``"off"`` (a frozen PRM).
        micro_batch_size: Sequences per forward/backward.
        max_grad_norm: Gradient clipping (0 = off).
        reduce_sum: Sums a tensor over processes (the loss is normalised by the global count).
    """

    def __init__(self, model: torch.nn.Module, ref_model: torch.nn.Module, optimizer: torch.optim.Optimizer, accelerator: Any,
                 beta: float, update: str, micro_batch_size: int, max_grad_norm: float,
                 reduce_sum: Callable[[torch.Tensor], torch.Tensor]):
        self.model, self.ref_model, self.optimizer, self.accel = model, ref_model, optimizer, accelerator
        self.beta, self.update_mode = beta, update
        self.micro_batch_size, self.max_grad_norm = micro_batch_size, max_grad_norm
        self.reduce_sum = reduce_sum

    def process_rewards(self, batch: TokenBatch, idx: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor,
                        ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        """Token rewards ``[B, L-1]`` for the rows ``idx`` of ``batch`` (0 elsewhere), updating the
        PRM on ``labels`` ``[B]`` (1 = the verifier passed the completion) as configured.

        ``mask`` ``[B, L-1]`` marks the completion tokens that count; ``ref_logp`` may pass in
        reference log-probs at temperature 1 that were already computed.
        """
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        if ref_logp is None:
            ref_logp = self._logp(self.ref_model, batch, idx)
        if self.update_mode == "before":
            metrics |= self._update(batch, idx, mask, labels, ref_logp)
        logp = self._logp(self.model, batch, idx)
        rewards = implicit_process_rewards(logp, ref_logp, mask, self.beta)
        valid = mask.sum(-1) > 0
        if self.update_mode != "before":  # the prediction of a PRM that has not seen these labels
            logits = implicit_outcome_logits(logp, ref_logp, mask, self.beta)
            metrics["prm/accuracy"] = prm_accuracy(logits, labels, valid)
            metrics["prm/loss"] = float((implicit_prm_ce_loss(logp, ref_logp, mask, labels, self.beta) * valid).sum() / valid.sum().clamp(min=1))
        if self.update_mode == "after":
            metrics |= self._update(batch, idx, mask, labels, ref_logp)
        metrics["prm/token_reward_mean"] = float(rewards.sum() / mask.sum().clamp(min=1))
        metrics["prm/seq_reward_mean"] = float(rewards.sum(-1)[valid].mean()) if valid.any() else 0.0
        metrics["time/prm"] = time.perf_counter() - t0
        return rewards, metrics

    @torch.no_grad()
    def _logp(self, model: torch.nn.Module, batch: TokenBatch, idx: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(batch.completion_mask)
        was_training = model.training
        model.eval()
        for micro in idx.split(self.micro_batch_size):
            logp, _ = token_logprobs(model, batch.select(micro).to(self.accel.device))
            out[micro, : logp.shape[1]] = logp.float().cpu()
        model.train(was_training)
        return out

    def _update(self, batch: TokenBatch, idx: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor, ref_logp: torch.Tensor) -> dict[str, float]:
        """One optimizer step on the mean cross-entropy over every valid sequence of all processes."""
        accel = self.accel
        valid_rows = mask.sum(-1) > 0
        n_global = float(self.reduce_sum(torch.tensor([float(valid_rows[idx].sum())], device=accel.device))[0])
        live = idx if len(idx) else torch.zeros(1, dtype=torch.long)  # a process without sequences still joins the gradient sync
        weight = 1.0 if len(idx) else 0.0
        self.model.train()
        micros = live.split(self.micro_batch_size)
        loss_sum, logits_all = 0.0, torch.zeros(len(labels))
        for i, micro in enumerate(micros):
            sub = batch.select(micro).to(accel.device)
            width = sub.completion_mask.shape[1]
            m = mask[micro, :width].to(accel.device) * weight
            sync = accel.no_sync(self.model) if i < len(micros) - 1 and accel.num_processes > 1 else nullcontext()
            with sync:
                logp, _ = token_logprobs(self.model, sub)
                ref = ref_logp[micro, :width].to(accel.device)
                per_seq = implicit_prm_ce_loss(logp, ref, m, labels[micro].to(accel.device), self.beta)
                loss = (per_seq * (m.sum(-1) > 0)).sum() / max(n_global, 1.0)
                accel.backward(loss * accel.num_processes)  # DDP averages over processes; the count already covers them
            loss_sum += float(loss.detach())
            logits_all[micro] = implicit_outcome_logits(logp.detach(), ref, m, self.beta).float().cpu()
        grad_norm = float(accel.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)) if self.max_grad_norm > 0 else float("nan")
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        local_valid = torch.zeros(len(labels), dtype=torch.bool)
        local_valid[idx] = valid_rows[idx]
        # loss and accuracy of the PRM before this update, on labels it had not seen: its honest prediction quality
        return {"prm/loss": float(self.reduce_sum(torch.tensor([loss_sum], device=accel.device))[0]),
                "prm/accuracy": prm_accuracy(logits_all, labels, local_valid), "prm/grad_norm": grad_norm}

    def save(self, directory: Path) -> None:
        """The PRM in Hugging Face format plus its optimizer state, under ``directory``."""
        self.accel.unwrap_model(self.model).save_pretrained(directory)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)

    def load_optimizer(self, directory: Path) -> None:
        self.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=False))
