"""Compare greedy evaluations of several models on the same problems, with paired intervals.

Each report directory is what `rlvr eval` writes (``report.json`` and ``predictions.jsonl``). The
problems they share (by id) are paired; the difference of two accuracies gets Newcombe's paired
interval (`rlvr.eval.metrics.paired_difference_interval`), which is much narrower than two
independent intervals when the models agree on most problems.

The usual use is before / after / control: the base model, the trained model and a format-only
control trained at the same budget (``verify.reward=format``). after - before is the gain,
control - before the gain that format alone explains, and after - control the gain beyond format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlvr import UserError
from rlvr.eval.metrics import paired_difference_interval, wilson_interval


@dataclass(frozen=True)
class GreedyResult:
    """One report's greedy verdicts by problem id, and whether each answer was well formed."""

    label: str
    path: Path
    task: str
    split: str
    passed: dict[str, bool]
    answered: dict[str, bool]

    @classmethod
    def load(cls, path: str | Path, label: str | None = None) -> GreedyResult:
        path = Path(path)
        report_file, rows_file = path / "report.json", path / "predictions.jsonl"
        for f in (report_file, rows_file):
            if not f.is_file():
                raise UserError(f"{f}: not found; pass a directory written by `rlvr eval` (it holds report.json and predictions.jsonl)")
        report = json.loads(report_file.read_text())
        passed, answered = {}, {}
        with rows_file.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                try:
                    row = json.loads(line)
                    greedy = row["greedy"][0]
                except (json.JSONDecodeError, KeyError, IndexError, TypeError):
                    raise UserError(f"{rows_file}:{n}: not a greedy prediction row (evaluate with the greedy pass on)") from None
                passed[str(row["id"])] = bool(greedy.get("passed", greedy.get("reward", 0.0) >= 1.0))
                answered[str(row["id"])] = greedy.get("status") == "ok" and greedy.get("extracted") is not None
        task = report.get("task", {})
        return cls(label or path.name, path, task.get("id", "?") if isinstance(task, dict) else str(task), str(report.get("split", "?")), passed, answered)


@dataclass(frozen=True)
class Difference:
    """``second - first`` accuracy on their shared problems, with its paired 95% interval."""

    first: str
    second: str
    n: int
    diff: float
    lo: float
    hi: float
    only_first: int
    only_second: int

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def compare(results: list[GreedyResult]) -> tuple[list[str], list[Difference]]:
    """The shared problem ids and every pairwise difference (later minus earlier)."""
    if len(results) < 2:
        raise UserError("compare needs at least two evaluation directories")
    tasks = {(r.task, r.split) for r in results}
    if len(tasks) > 1:
        raise UserError("these evaluations are of different tasks or splits: " + ", ".join(f"{r.label}: {r.task} {r.split}" for r in results))
    shared = sorted(set.intersection(*(set(r.passed) for r in results)))
    if not shared:
        raise UserError("these evaluations share no problem ids")
    diffs = []
    for i, a in enumerate(results):
        for b in results[i + 1:]:
            x, y = [a.passed[k] for k in shared], [b.passed[k] for k in shared]
            d, lo, hi = paired_difference_interval(x, y)
            diffs.append(Difference(a.label, b.label, len(shared), d, lo, hi,
                                    sum(1 for p, q in zip(x, y) if p and not q), sum(1 for p, q in zip(x, y) if q and not p)))
    return shared, diffs


def render(results: list[GreedyResult], shared: list[str], diffs: list[Difference]) -> str:
    """A markdown table of accuracies (Wilson 95%) and one of paired differences."""
    n = len(shared)
    lines = [f"{results[0].task} ({results[0].split}), {n} shared problems, greedy", "",
             "| model | accuracy | 95% CI | answered |", "|---|---:|---|---:|"]
    for r in results:
        right = sum(r.passed[k] for k in shared)
        lo, hi = wilson_interval(right, n)
        lines.append(f"| {r.label} | {right / n:.3f} ({right}/{n}) | {lo:.3f}–{hi:.3f} | {sum(r.answered[k] for k in shared) / n:.3f} |")
    lines += ["", "| difference | value | paired 95% CI | only first right | only second right |", "|---|---:|---|---:|---:|"]
    for d in diffs:
        mark = "" if d.excludes_zero else " (interval includes 0)"
        lines.append(f"| {d.second} − {d.first} | {d.diff:+.3f} | {d.lo:+.3f} to {d.hi:+.3f}{mark} | {d.only_first} | {d.only_second} |")
    return "\n".join(lines)
