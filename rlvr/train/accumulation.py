"""Gradient accumulation: the one routine that turns a minibatch into an optimizer step
(`HarnessAccumulation.optimizer_step`, part of `rlvr.train.harness.Harness`), the `Objective` it
minimises, and the statistics of its micro-batches and steps (`StatsAccumulator`, `merge_stats`)."""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Protocol

import torch

from envs import faults

if TYPE_CHECKING:  # an annotation only: importing it loads transformers
    from rlvr.train.trainable import TrainableModel


class Objective(Protocol):
    """What `HarnessAccumulation.optimizer_step` minimises over a minibatch of rows.

    ``totals(rows)`` are this process's normalising counts for the rows (e.g. sequences and
    tokens); the harness sums them over processes. ``loss(rows, totals)`` is the loss of one
    micro-batch already divided by those whole-minibatch totals (so the gradient does not depend on
    how the minibatch is split), with statistics and the weight they carry (e.g. its token count).
    """

    def totals(self, rows: torch.Tensor) -> torch.Tensor: ...

    def loss(self, rows: torch.Tensor, totals: torch.Tensor) -> tuple[torch.Tensor, dict[str, float], float]: ...


class StatsAccumulator:
    """Weighted means of micro-batch statistics; keys ending in ``_min``/``_max`` keep the extreme,
    keys ending in ``_sum`` add up (a micro-batch's share of a whole-batch loss)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, float] = {}
        self.extremes: dict[str, float] = {}

    def add(self, stats: dict[str, float], weight: float) -> None:
        for k, v in stats.items():
            if k.endswith("_min"):
                self.extremes[k] = min(self.extremes.get(k, math.inf), v)
            elif k.endswith("_max"):
                self.extremes[k] = max(self.extremes.get(k, -math.inf), v)
            elif k.endswith("_sum"):
                self.extremes[k] = self.extremes.get(k, 0.0) + v
            else:
                self.sums[k] = self.sums.get(k, 0.0) + v * weight
                self.weights[k] = self.weights.get(k, 0.0) + weight

    def result(self) -> dict[str, float]:
        out = {k: s / self.weights[k] if self.weights[k] else 0.0 for k, s in self.sums.items()}
        return out | self.extremes


def merge_stats(many: list[dict[str, float]]) -> dict[str, float]:
    """Statistics of several optimizer steps: means (also of ``_sum`` keys: each step's total),
    extremes for ``_min``/``_max`` keys."""
    acc = StatsAccumulator()
    for stats in many:
        acc.add({(k[:-4] if k.endswith("_sum") else k): v for k, v in stats.items()}, 1.0)
    return acc.result()


class HarnessAccumulation:
    """Micro-batches and the optimizer step, mixed into `rlvr.train.harness.Harness` (its
    accelerator, process count and collectives: ``num_processes``, ``reduce_sum``, ``gather_counts``)."""

    accel: Any
    sharded: bool

    def optimizer_step(self, part: TrainableModel, rows: torch.Tensor, objective: Objective, micro_batch_size: int,
                       lengths: torch.Tensor | None = None, idle: torch.Tensor | None = None) -> dict[str, float] | None:
        """One optimizer step of ``part`` on ``rows`` (this process's share of a minibatch).

        Micro-batches of ``micro_batch_size`` rows (sorted by ``lengths`` when given: see
        `micro_batches`) accumulate gradients; only the last one syncs them across processes. A process
        with no rows while others have some joins with one row of weight 0 (DDP needs every process
        in every all-reduce); with one process an empty minibatch is no step (returns None). The
        loss is scaled by the process count because DDP averages gradients while the objective is
        already normalised by totals over all processes. Returns the weighted statistics of the
        objective, ``grad_norm`` (before clipping) and ``lr``.

        ``idle`` ``[len(rows)]`` (bool) marks rows whose loss and gradient are exactly 0 (e.g. a zero
        advantage with no KL or entropy term): they count in the objective's totals, so the loss is
        the same, but are not forwarded. Statistics then cover the forwarded rows.
        """
        accel = self.accel
        weight = 1.0
        if len(rows) == 0:
            if self.num_processes == 1:
                return None
            rows, weight = torch.zeros(1, dtype=torch.long), 0.0
        totals = self.reduce_sum(objective.totals(rows).float() * weight)
        if idle is not None and weight and not bool(idle.all()):  # all idle: forward them (the step still happens)
            rows = rows[~idle]
        micros = self.micro_batches(rows, micro_batch_size, lengths, collective=self.sharded)
        part.model.train()
        stats, loss_sum = StatsAccumulator(), 0.0
        for i, (micro, real) in enumerate(micros):
            w = weight if real else 0.0
            sync = accel.no_sync(part.model) if i < len(micros) - 1 and self.num_processes > 1 else nullcontext()
            with sync:
                loss, micro_stats, micro_weight = objective.loss(micro, totals)
                accel.backward(loss * (w * self.num_processes))
            loss_sum += float(loss.detach()) * w
            if w:
                stats.add(micro_stats, micro_weight)
        out = stats.result() | {"loss": loss_sum}
        if part.max_grad_norm > 0:
            out["grad_norm"] = float(accel.clip_grad_norm_(part.model.parameters(), part.max_grad_norm))
        faults.reached("optimizer_step")
        part.optimizer.step()
        part.scheduler.step()
        part.optimizer.zero_grad(set_to_none=True)
        part.updates += 1
        out["lr"] = part.scheduler.get_last_lr()[0]
        return out

    def micro_batches(self, rows: torch.Tensor, size: int, lengths: torch.Tensor | None = None,
                      collective: bool = False) -> list[tuple[torch.Tensor, bool]]:
        """``rows`` in micro-batches of ``size`` (sorted by ``lengths`` when given: sequence
        lengths cut padding, group ids keep the sequences that share a prompt together for
        packing), each with whether it is real. With ``collective`` (a sharded model: every
        forward is a collective) every process gets as many micro-batches as the busiest one, the
        extra ones a placeholder row to be given weight 0."""
        if lengths is not None and len(rows):
            rows = rows[torch.argsort(lengths[rows], stable=True)]
        micros = [(m, True) for m in rows.split(size)]
        if collective and self.num_processes > 1:
            most = max(self.gather_counts(len(micros)))
            micros += [(torch.zeros(1, dtype=torch.long), False)] * (most - len(micros))
        return micros


__all__ = ["HarnessAccumulation", "Objective", "StatsAccumulator", "merge_stats"]
