"""Compare greedy evaluations of several models on the same problems, with paired intervals.

Each report directory is what `rlvr eval` writes (``report.json`` and ``predictions.jsonl``). The
problems they share are paired by content (each prediction row's ``problem_sha``: a problem id is
only a position in its data, so two data sets reuse the same ids for different questions); the difference of two accuracies gets Newcombe's paired
interval (`rlvr.eval.metrics.paired_difference_interval`), which is much narrower than two
independent intervals when the models agree on most problems.

The usual use is before / after / control: the base model, the trained model and a format-only
control trained at the same budget (``verify.reward=format``). after - before is the gain,
control - before the gain that format alone explains, and after - control the gain beyond format.

Several seeds per configuration are *arms* (`compare_arms`): each arm's accuracy is the mean over
its seeds with a 95% Student-t interval across seeds, and its difference to a reference arm is
paired twice: by problem within a seed (seed i of the arm against seed i of the reference), then
averaged over seeds, with a two-level bootstrap interval (seeds resampled, then problems).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from rlvr import UserError
from rlvr.eval.metrics import mean_t_interval, paired_difference_interval, two_level_bootstrap, wilson_interval


def problem_sha(prompt: Any, reference: Any) -> str:
    """What identifies a problem across evaluations: a hash of its question and reference."""
    blob = json.dumps([prompt, reference], sort_keys=True, ensure_ascii=False, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


@dataclass(frozen=True)
class GreedyResult:
    """One report's greedy verdicts by problem, and whether each answer was well formed.

    ``passed`` and ``answered`` are keyed by the problem's content (``problem_sha``, with ``#2``...
    for a question that repeats) when the predictions carry it, else by problem id (older reports);
    ``ids`` maps each key to the problem id in this evaluation."""

    label: str
    path: Path
    task: str
    split: str
    passed: dict[str, bool]
    answered: dict[str, bool]
    ids: dict[str, str] | None = None
    data_checksum: str | None = None

    @property
    def by_content(self) -> bool:
        return self.ids is not None

    @classmethod
    def load(cls, path: str | Path, label: str | None = None) -> GreedyResult:
        path = Path(path)
        report_file, rows_file = path / "report.json", path / "predictions.jsonl"
        for f in (report_file, rows_file):
            if not f.is_file():
                raise UserError(f"{f}: not found; pass a directory written by `rlvr eval` (it holds report.json and predictions.jsonl)")
        report = json.loads(report_file.read_text())
        passed, answered, ids = {}, {}, {}
        by_content = True
        with rows_file.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                try:
                    row = json.loads(line)
                    greedy = row["greedy"][0]
                except (json.JSONDecodeError, KeyError, IndexError, TypeError):
                    raise UserError(f"{rows_file}:{n}: not a greedy prediction row (evaluate with the greedy pass on)") from None
                by_content = by_content and isinstance(row.get("problem_sha"), str)
                key = base = str(row["problem_sha"]) if by_content else f"row {n}"
                repeat = 1
                while key in passed:  # the same question twice in the data: the second is its own problem
                    repeat += 1
                    key = f"{base}#{repeat}"
                ids[key] = str(row["id"])
                passed[key] = bool(greedy.get("passed", greedy.get("reward", 0.0) >= 1.0))
                answered[key] = greedy.get("status") == "ok" and greedy.get("extracted") is not None
        if not by_content:  # an older report: its rows are known by id only
            passed = {ids[k]: v for k, v in passed.items()}
            answered = {ids[k]: v for k, v in answered.items()}
        task = report.get("task", {})
        checksum = report.get("data_checksum")
        return cls(label or path.name, path, task.get("id", "?") if isinstance(task, dict) else str(task), str(report.get("split", "?")),
                   passed, answered, ids if by_content else None, str(checksum) if checksum is not None else None)


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


def shared_problems(results: list[GreedyResult]) -> list[str]:
    """The problem ids every result has; refuses results of different tasks or splits, or none shared."""
    tasks = {(r.task, r.split) for r in results}
    if len(tasks) > 1:
        raise UserError("these evaluations are of different tasks or splits: " + ", ".join(f"{r.label}: {r.task} {r.split}" for r in results))
    if not all(r.by_content for r in results) and len({r.data_checksum for r in results}) > 1:
        raise UserError("these evaluations are of different data (their data checksums differ) and "
                        + ", ".join(r.label for r in results if not r.by_content)
                        + " predate per-problem hashes: evaluate again with this version of rlvr to compare them")
    shared = sorted(set.intersection(*(set(r.passed) for r in results)))
    if not shared:
        ids = set.intersection(*(set((r.ids or {k: k for k in r.passed}).values()) for r in results))
        if ids:
            raise UserError(f"these evaluations share problem ids ({len(ids)}, e.g. {min(ids)}) but not the questions under them: "
                            "they are of different data and cannot be paired")
        raise UserError("these evaluations share no problems")
    return shared


def compare(results: list[GreedyResult]) -> tuple[list[str], list[Difference]]:
    """The shared problem ids and every pairwise difference (later minus earlier)."""
    if len(results) < 2:
        raise UserError("compare needs at least two evaluation directories")
    labels = [r.label for r in results]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:  # pairwise rows are named by label (arms name their seeds themselves)
        raise UserError(f"labels repeat ({', '.join(repeated)}): give each evaluation its own label (--labels / labels=)")
    shared = shared_problems(results)
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


# -- several seeds per arm ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Arm:
    """One configuration evaluated after several training runs: ``runs[i]`` is seed i's evaluation."""

    label: str
    runs: tuple[GreedyResult, ...]


@dataclass(frozen=True)
class ArmSummary:
    """An arm's accuracy on the shared problems: one value per seed, their mean and its 95% Student-t
    interval across seeds, clipped to [0, 1] (None with one seed)."""

    label: str
    accuracies: tuple[float, ...]
    mean: float
    lo: float | None
    hi: float | None

    @property
    def seeds(self) -> int:
        return len(self.accuracies)


@dataclass(frozen=True)
class ArmDifference:
    """``arm - reference`` accuracy, paired by problem within each seed and averaged over seeds, with
    its two-level bootstrap 95% interval; ``per_seed`` holds each seed's paired difference."""

    reference: str
    arm: str
    n: int
    diff: float
    lo: float
    hi: float
    per_seed: tuple[float, ...]

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def compare_arms(arms: list[Arm], reference: str | None = None, draws: int = 2000) -> tuple[list[str], list[ArmSummary], list[ArmDifference]]:
    """The shared problem ids, each arm's summary, and each other arm's difference to ``reference``
    (default: the first arm). Seeds are paired by position: an arm must have as many runs as the reference."""
    if not arms or any(not a.runs for a in arms):
        raise UserError("every arm needs at least one evaluation directory")
    labels = [a.label for a in arms]
    if len(set(labels)) != len(labels):
        raise UserError(f"arm names repeat: {', '.join(labels)}")
    ref = next((a for a in arms if a.label == (reference or labels[0])), None)
    if ref is None:
        raise UserError(f"--reference {reference!r} is not an arm (arms: {', '.join(labels)})")
    shared = shared_problems([r for a in arms for r in a.runs])
    summaries = []
    for a in arms:
        accuracies = tuple(sum(r.passed[k] for k in shared) / len(shared) for r in a.runs)
        mean, lo, hi = mean_t_interval(accuracies)
        # an accuracy lies in [0, 1]: so does its interval (two seeds give a wide one)
        summaries.append(ArmSummary(a.label, accuracies, mean, None if lo is None else max(0.0, lo), None if hi is None else min(1.0, hi)))
    diffs = []
    for a in arms:
        if a is ref:
            continue
        if len(a.runs) != len(ref.runs):
            raise UserError(f"arm {a.label} has {len(a.runs)} seeds and the reference {ref.label} {len(ref.runs)}: differences are paired "
                            "by seed, so give both the same seeds in the same order")
        table = [[float(r.passed[k]) - float(q.passed[k]) for k in shared] for r, q in zip(a.runs, ref.runs)]
        mean, lo, hi = two_level_bootstrap(table, draws=draws)
        diffs.append(ArmDifference(ref.label, a.label, len(shared), mean, lo, hi, tuple(sum(row) / len(row) for row in table)))
    return shared, summaries, diffs


def render_arms(first: GreedyResult, shared: list[str], summaries: list[ArmSummary], diffs: list[ArmDifference]) -> str:
    """Markdown tables: each arm's accuracy over seeds, and each difference to the reference."""
    lines = [f"{first.task} ({first.split}), {len(shared)} shared problems, greedy; accuracy: mean over seeds with its 95% t-interval "
             "across seeds; differences: paired by problem within a seed, mean over seeds, 95% two-level bootstrap (seeds, then problems)",
             "", "| arm | seeds | accuracy | 95% CI across seeds | per seed |", "|---|---:|---:|---|---|"]
    for s in summaries:
        ci = f"{s.lo:.3f}–{s.hi:.3f}" if s.lo is not None else "— (one seed)"
        lines.append(f"| {s.label} | {s.seeds} | {s.mean:.3f} | {ci} | {', '.join(f'{a:.3f}' for a in s.accuracies)} |")
    if diffs:
        lines += ["", "| difference | value | 95% CI | per seed |", "|---|---:|---|---|"]
        for d in diffs:
            mark = "" if d.excludes_zero else " (interval includes 0)"
            lines.append(f"| {d.arm} − {d.reference} | {d.diff:+.3f} | {d.lo:+.3f} to {d.hi:+.3f}{mark} | {', '.join(f'{x:+.3f}' for x in d.per_seed)} |")
    return "\n".join(lines)
