"""Proof that held-out problems do not leak into training data.

Questions are compared by the task's canonical form (`Task.canonical_question`), hashed. For an
unbounded training stream, a prefix of ``train_limit`` items is checked.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from tasks.base import Task


@dataclass
class LeakageReport:
    """Overlap between a training split and each held-out split.

    Attributes:
        train_checked: How many training items were compared.
        overlaps: ``{heldout split: [canonical questions found in train]}``.
    """

    task: str
    train_split: str
    train_checked: int
    heldout_sizes: dict[str, int]
    overlaps: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not any(self.overlaps.values())

    def summary(self) -> str:
        held = ", ".join(f"{s} ({n})" for s, n in self.heldout_sizes.items())
        if self.clean:
            return f"no overlap between {self.train_checked} {self.train_split} items and {held}"
        found = "; ".join(f"{s}: {len(q)} shared, e.g. {q[:3]}" for s, q in self.overlaps.items() if q)
        return f"LEAK: {found}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_leakage(task: Task, train_split: str = "train", train_limit: int = 20_000) -> LeakageReport:
    """Compare ``train_split`` (its first ``train_limit`` items if unbounded) with every held-out split."""
    train_n = task.size(train_split)
    n = train_limit if train_n is None else train_n
    train = {_digest(task.canonical_question(task.get(train_split, i))) for i in range(n)}
    report = LeakageReport(task.id, train_split, n, {})
    for split in task.heldout_splits:
        if split not in task.splits:
            continue
        held = task.problems(split)
        report.heldout_sizes[split] = len(held)
        report.overlaps[split] = [q for q in (task.canonical_question(p) for p in held) if _digest(q) in train]
    return report
