"""Asynchronous generation with several training processes: rank 0 leads, every rank trains.

One producer serves the whole run (`rlvr.rollout.asynchronous.AsyncRollouts`, on rank 0, driving the
rollout servers of ``rollout.engine=vllm_server``); the other ranks hold no generation side at all.

    rank 0:    take round r (a global batch) ─┐ broadcast ┌─ train its share ─ gather weights ─ stage version r
    rank 1..:                                 └──────────▶└─ train its share ─ gather weights
                                                                              (every rank: FSDP all-gather)

- **Batches**: each round is the global batch (``rollout.prompts_per_step`` x processes prompts),
  generated, verified and filtered by the producer as one process would; rank 0 sends it to every
  rank (`Lead.run`: `torch.distributed.broadcast_object_list`), every rank logs the same metrics of
  the whole batch, and each trains on a contiguous share of its groups (`share`). The loss divides
  by totals of the whole optimizer batch, so the update does not depend on how the batch is split:
  N processes train what one process with the same global batch trains.
- **Weights**: after each update every rank takes part in gathering the full weights of the sharded
  policy (`full_weights`: one all-gather per tensor under FSDP), and rank 0 stages them as the next
  version for the producer. The sync probe's trainer log-probs are a forward of the sharded model:
  every rank computes them, rank 0 keeps them.
- **Faults**: whatever rank 0's side raises (a dead server past its failover, a stall past
  ``rollout.async.timeout_s``, a failed probe) is sent to every rank in place of the batch, so every
  process stops with the same one-line error and none is left waiting in a collective; no rank then
  writes a checkpoint (the producer's state cannot be saved), and the last one is kept. The other
  ranks wait for a batch inside the broadcast, so the process group's timeout (torch's default: 30
  minutes) must outlast ``rollout.async.timeout_s`` (600 s) for rank 0 to be the one that names a stall.
- **Checkpoints**: the producer's state is saved once, by rank 0, with the run's state (every
  process reads it back on resume; only rank 0 restores the producer).
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Callable, TypeVar

import torch

from rlvr import TrainingError
from rlvr.rollout.sampling import SamplingReport
from rlvr.rollout.weights import Weights, named_weights

T = TypeVar("T")


class Lead:
    """Rank 0 runs a piece of the rollout side and every rank gets its outcome.

    Args:
        rank / world: This process and the number of processes.
    """

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.failed = False  # an error came from rank 0: the rollout side's state cannot be checkpointed

    @property
    def leads(self) -> bool:
        return self.rank == 0

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on rank 0, its result on every rank; an error it raises is raised on every rank."""
        outcome: list[Any] = [None]
        if self.leads:
            try:
                outcome[0] = ("ok", fn())
            except BaseException as e:  # sent to the other ranks, then raised here too
                outcome[0] = ("error", _portable(e))
        torch.distributed.broadcast_object_list(outcome, src=0)
        kind, value = outcome[0]
        if kind == "error":
            self.failed = True
            raise value
        return value


def _portable(error: BaseException) -> BaseException:
    """``error`` itself when it survives pickling (the other ranks raise the same type), else a
    `TrainingError` with its message."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return TrainingError(f"{type(error).__name__}: {error}")


def full_weights(weights: Weights, full_state: bool, keep: bool = True) -> dict[str, torch.Tensor]:
    """The policy's weights in full, by name (a collective under FSDP: every rank calls it, in the
    same order). ``full_state``: a module's whole ``state_dict`` rather than its parameters (as
    `rlvr.rollout.worker.WeightSlots` reads it). ``keep=False`` (the ranks that do not push): take
    part in the gathers and drop each tensor at once, so only the leading rank holds a full copy in
    host memory (with 8 ranks a node, 8 copies of a large model's weights would not fit)."""
    from torch.distributed.tensor import DTensor

    pairs = weights.state_dict().items() if full_state and isinstance(weights, torch.nn.Module) else named_weights(weights)
    full: dict[str, torch.Tensor] = {}
    for name, t in pairs:
        if isinstance(t, DTensor):
            t = t.full_tensor()  # every rank, whether it keeps the result or not
        if keep:
            full[name] = t.detach().to("cpu")
    return full


def bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """The contiguous part ``[a, b)`` of ``n`` items that ``rank`` of ``world`` takes (sizes differ by at most one)."""
    return n * rank // world, n * (rank + 1) // world


def share(report: SamplingReport, rank: int, world: int) -> SamplingReport:
    """This rank's part of a global batch: a contiguous share of the kept groups and of the generated
    ones (each generated group counted on one rank only, so sums over ranks are the batch's)."""
    a, b = bounds(len(report.kept), rank, world)
    c, d = bounds(len(report.generated), rank, world)
    return dataclasses.replace(report, kept=report.kept[a:b], generated=report.generated[c:d], prepared={})


__all__ = ["Lead", "bounds", "full_weights", "share"]
