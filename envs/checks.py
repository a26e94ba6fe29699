"""Self-checks every environment must pass (used by `rlvr envs check`).

For each sample problem: the gold completion passes, every perturbed completion fails, an empty
completion fails, and verifying the same completion twice gives the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from envs.base import Environment, safe_verify
from envs.types import Problem


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    skipped: bool = False


@dataclass
class CheckReport:
    env_id: str
    problems: int
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed or r.skipped for r in self.results)


def check_environment(env: Environment, problems: Sequence[Problem]) -> CheckReport:
    """Run the self-checks on ``problems`` (the environment's own examples if empty)."""
    problems = list(problems) or env.examples()
    report = CheckReport(env.id or type(env).__name__, len(problems))
    if not problems:
        report.results.append(CheckResult("problems", False, "no problems to check: bind a task to this environment or implement examples()"))
        return report

    def run(name: str, per_problem) -> None:
        failures, skipped = [], 0
        for p in problems:
            outcome = per_problem(p)
            if outcome is None:
                skipped += 1
            elif outcome:
                failures.append(f"{p.id}: {outcome}")
        if skipped == len(problems):
            report.results.append(CheckResult(name, True, "not applicable: the environment provides no such completions", skipped=True))
        else:
            detail = f"{len(problems) - skipped - len(failures)}/{len(problems) - skipped} ok"
            report.results.append(CheckResult(name, not failures, detail + ("; " + "; ".join(failures[:3]) if failures else "")))

    def gold_passes(p: Problem) -> str | None:
        gold = env.gold_completion(p)
        if gold is None:
            return None
        v = safe_verify(env, p, gold)
        return "" if v.passed else f"gold completion failed ({v.status.value}: {v.info.get('error', v.extracted)!r})"

    def perturbed_fail(p: Problem) -> str | None:
        wrong = env.wrong_completions(p)
        if not wrong:
            return None
        bad = [w for w in wrong if safe_verify(env, p, w).passed]
        return f"wrong completion passed: {bad[0]!r}" if bad else ""

    def empty_fails(p: Problem) -> str:
        v = safe_verify(env, p, "")
        return "empty completion passed" if v.passed else ""

    def deterministic(p: Problem) -> str | None:
        candidates = [c for c in [env.gold_completion(p), *env.wrong_completions(p)] if c is not None] or [""]
        for c in candidates:
            a, b = safe_verify(env, p, c), safe_verify(env, p, c)
            if (a.reward, a.passed, a.status, a.extracted) != (b.reward, b.passed, b.status, b.extracted):
                return f"two verifications of {c[:40]!r} differ"
        return ""

    run("gold passes", gold_passes)
    run("perturbed answers fail", perturbed_fail)
    run("empty answer fails", empty_fails)
    run("deterministic", deterministic)
    return report
