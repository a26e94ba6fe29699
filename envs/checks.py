"""Self-checks every environment must pass (used by `rlvr envs check`).

For each sample problem: the gold completion passes, every perturbed completion fails, an empty
completion fails, an echo of the prompt fails (`Environment.echo_completions`: the question
copied, and for math each of its expressions given as the answer, ``Answer: 98*1`` for "Compute
98*1."), and verifying the same completion twice gives the same verdict. Every verification
must also *work*: a verifier that raises, returns a malformed verdict or times out fails the
check (a check that passed on error verdicts would pass a verifier that never judges anything). Each verification runs in a `VerifierPool` thread with a budget, so a verifier that
never returns stops the check after one budget instead of hanging it.

A multi-turn environment also plays a scripted episode per problem through its ``step``
(`MultiTurnEnvironment.scripted_turns`, by default an empty call and then the gold completion),
each step within the same budget: a step that raises, hangs or returns something that is not an
observation fails the check, and the episode must be judged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from envs.base import Environment
from envs.episode import End, Episode, MultiTurnEnvironment, Role, StepRunner, Turn, play
from envs.pool import VerifierPool
from envs.types import Problem, Status, Verdict

DEFAULT_TIMEOUT_S = 30.0
"""Budget of one verification during the checks (the training default)."""


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
    hung: bool = False
    """True when a verification ran out of its budget (the remaining checks were not run)."""

    @property
    def passed(self) -> bool:
        return all(r.passed or r.skipped for r in self.results)


class _Hung(Exception):
    """A verification or a step timed out: the checks stop here (``check`` names the failed check)."""

    def __init__(self, message: str, check: str = "verification finishes"):
        super().__init__(message)
        self.check = check


class _Verifier:
    """Verifies one completion at a time within a budget and remembers every failed verdict."""

    def __init__(self, pool: VerifierPool):
        self.pool = pool
        self.calls = 0
        self.failures: list[tuple[str, Verdict]] = []

    def __call__(self, problem: Problem, completion: str | Episode) -> Verdict:
        verdict = self.pool.verify([problem], [completion])[0]
        self.calls += 1
        if verdict.status.is_failure:
            self.failures.append((problem.id, verdict))
        if verdict.status is Status.TIMEOUT:
            shown = repr(completion[:40]) if isinstance(completion, str) else "the scripted episode"
            raise _Hung(f"verifying {shown} for {problem.id} did not finish within {self.pool.timeout_s:g} s")
        return verdict


def _reason(verdict: Verdict) -> str:
    return f"{verdict.status.value}: {verdict.info.get('error') or verdict.info.get('timeout_s', '')}"


def _hook(name: str, call: Callable[[], Any]) -> tuple[Any, str | None]:
    """An environment's self-check hook, with an exception turned into a failure message."""
    try:
        return call(), None
    except Exception as e:
        return None, f"{name} raised {type(e).__name__}: {e}"


def check_environment(env: Environment, problems: Sequence[Problem], timeout_s: float = DEFAULT_TIMEOUT_S) -> CheckReport:
    """Run the self-checks on ``problems`` (the environment's own examples if empty); each
    verification gets ``timeout_s`` seconds, and the first one over it stops the checks."""
    if not problems:
        problems, error = _hook("examples()", env.examples)
        problems = list(problems or [])
    else:
        problems, error = list(problems), None
    report = CheckReport(env.id or type(env).__name__, len(problems))
    if not problems:
        report.results.append(CheckResult("problems", False, error or "no problems to check: bind a task to this environment or implement examples()"))
        return report

    def run(name: str, per_problem: Callable[[Problem], str | None]) -> None:
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

    with VerifierPool(env, workers=1, kind="thread", timeout_s=timeout_s) as pool:
        verify = _Verifier(pool)

        def gold_passes(p: Problem) -> str | None:
            gold, error = _hook("gold_completion()", lambda: env.gold_completion(p))
            if error or gold is None:
                return error
            v = verify(p, gold)
            if v.status.is_failure:
                return f"gold completion was not judged ({_reason(v)})"
            return "" if v.passed else f"gold completion failed ({v.status.value}: {v.info.get('error', v.extracted)!r})"

        def perturbed_fail(p: Problem) -> str | None:
            wrong, error = _hook("wrong_completions()", lambda: env.wrong_completions(p))
            if error or not wrong:
                return error
            for w in wrong:
                v = verify(p, w)
                if v.status.is_failure:
                    return f"wrong completion {w[:40]!r} was not judged ({_reason(v)})"
                if v.passed:
                    return f"wrong completion passed: {w!r}"
            return ""

        def empty_fails(p: Problem) -> str:
            v = verify(p, "")
            if v.status.is_failure:
                return f"empty completion was not judged ({_reason(v)})"
            return "empty completion passed" if v.passed else ""

        def echo_fails(p: Problem) -> str | None:
            echoes, error = _hook("echo_completions()", lambda: env.echo_completions(p))
            if error or not echoes:
                return error
            for e in echoes:
                v = verify(p, e)
                if v.status.is_failure:
                    return f"echo {e[:40]!r} was not judged ({_reason(v)})"
                if v.passed:
                    return f"an echo of the prompt passed: {e[:80]!r}"
            return ""

        def deterministic(p: Problem) -> str | None:
            gold, _ = _hook("gold_completion()", lambda: env.gold_completion(p))
            wrong, _ = _hook("wrong_completions()", lambda: env.wrong_completions(p))
            candidates = [c for c in [gold, *(wrong or [])] if c is not None] or [""]
            for c in candidates:
                a, b = verify(p, c), verify(p, c)
                if a.status.is_failure or b.status.is_failure:
                    return f"{c[:40]!r} was not judged ({_reason(a if a.status.is_failure else b)})"
                if (a.reward, a.passed, a.status, a.extracted) != (b.reward, b.passed, b.status, b.extracted):
                    return f"two verifications of {c[:40]!r} differ ({a.status.value} {a.reward:g} vs {b.status.value} {b.reward:g})"
            return ""

        checks = [("gold passes", gold_passes), ("perturbed answers fail", perturbed_fail),
                  ("empty answer fails", empty_fails), ("echo of the prompt fails", echo_fails), ("deterministic", deterministic)]
        steps = StepRunner(max_workers=1)
        if isinstance(env, MultiTurnEnvironment):
            checks.append(("steps work", lambda p: _scripted_episode(env, p, verify, steps, timeout_s)))
        try:
            for name, per_problem in checks:
                run(name, per_problem)
        except _Hung as e:
            report.hung = True
            not_run = [name for name, _ in checks[len(report.results):]]
            report.results.append(CheckResult(e.check, False, f"{e}; not run: {', '.join(not_run)}"))
            return report
        finally:
            steps.close()  # a hung step's thread is abandoned (a daemon: it never holds up the exit)

    failed = verify.failures
    if failed:
        pid, first = failed[0]
        detail = f"{len(failed)}/{verify.calls} verifications failed; first on {pid}: {_reason(first)}"
    else:
        detail = f"{verify.calls}/{verify.calls} verifications judged (no error or timeout)"
    report.results.append(CheckResult("verifier works", not failed, detail))
    return report


def _scripted_episode(env: MultiTurnEnvironment, problem: Problem, verify: _Verifier, steps: StepRunner, timeout_s: float) -> str | None:
    """Play `MultiTurnEnvironment.scripted_turns` through ``step`` (each step within ``timeout_s``)
    and judge the episode: "" when it worked, the reason when not, None without a script."""
    script, error = _hook("scripted_turns()", lambda: env.scripted_turns(problem))
    if error or not script:
        return error

    def policy(turns: Sequence[Turn]) -> str:  # the script's next turn; past its end, an answer that calls nothing
        taken = sum(t.role is Role.MODEL for t in turns)
        return script[taken] if taken < len(script) else ""

    episode = play(env, problem, policy, limits=dataclasses.replace(env.limits, step_timeout_s=timeout_s), runner=steps)
    if episode.end is End.STEP_TIMEOUT:
        raise _Hung(f"step on {problem.id} did not return within {timeout_s:g} s", check="step finishes")
    if episode.end is End.STEP_ERROR:
        return f"step failed: {(episode.error or '').splitlines()[0]}"
    v = verify(problem, episode)
    if v.status.is_failure:
        return f"the scripted episode was not judged ({_reason(v)})"
    return ""
