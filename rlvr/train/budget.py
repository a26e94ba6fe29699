"""What a run has spent, and the budget that stops it (``budget.*``).

Runs of different algorithms are compared at an equal budget, not an equal number of steps: a
DAPO step generates about 3x the completions of a GRPO step (dynamic sampling refills the batch),
a PRIME step about 4x, and a PPO step takes 4 optimizer steps. A run counts three quantities
(`Spent`), logs them cumulatively every step as ``spent/completions``, ``spent/optimizer_steps``
and ``spent/seconds``, and stops after the step that reaches any limit of its `BudgetConfig`:

- **completions**: completions the rollout engine generated for training (every group sampled,
  kept or not; an episode counts once), summed over processes; evaluation is not counted;
- **optimizer steps**: optimizer steps of the policy (a PPO batch takes ``epochs_per_batch x
  minibatches``; a step skipped for lack of signal takes none);
- **seconds**: wall time of the training steps (generation, verification, update); evaluation and
  checkpoints are not counted.

The step in progress always finishes, so a run overshoots a limit by at most one step's
consumption, and ``spent/*`` says by how much. A run stopped by its budget is complete: it saves its
final model. The counts are kept in checkpoints, so a resumed run continues with what it had spent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from rlvr.config import help_field


@dataclass
class BudgetConfig:
    """Limits on what a run spends (None = no limit); the run stops after the step that reaches one.
    ``update.steps`` (``steps`` for SFT) stays the upper bound."""

    completions: int | None = help_field(None, "Stop after the step at which this many completions have been generated for training "
                                               "(every sampled completion, kept or not, summed over processes; evaluation not counted)", gt=0)
    optimizer_steps: int | None = help_field(None, "Stop after the step at which the policy has taken this many optimizer steps "
                                                   "(PPO takes update.epochs_per_batch x update.minibatches per batch)", gt=0)
    seconds: float | None = help_field(None, "Stop after the step at which the training steps have run this many seconds of wall time "
                                             "(generation, verification and updates; evaluation and checkpoints not counted)", gt=0)

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


@dataclass
class Spent:
    """What a run has spent so far (see the module docstring for what each count covers)."""

    completions: float = 0.0
    optimizer_steps: int = 0
    seconds: float = 0.0

    def charge(self, completions: float, optimizer_steps: int, seconds: float) -> None:
        """Add one step's ``completions`` and ``seconds``; ``optimizer_steps`` is the policy's total so far."""
        self.completions += completions
        self.optimizer_steps = optimizer_steps
        self.seconds += seconds

    def metrics(self) -> dict[str, float]:
        return {"spent/completions": float(self.completions), "spent/optimizer_steps": float(self.optimizer_steps),
                "spent/seconds": float(self.seconds)}

    def exhausted(self, budget: BudgetConfig) -> str | None:
        """The first limit of ``budget`` reached, as ``budget.KEY=LIMIT``, or None."""
        for f in fields(budget):
            limit = getattr(budget, f.name)
            if limit is not None and getattr(self, f.name) >= limit:
                return f"budget.{f.name}={limit:g}"
        return None

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any] | None) -> Spent:
        return cls(**(state or {}))


__all__ = ["BudgetConfig", "Spent"]
