"""Grading a solution against a `TestSuite`, with the verdict decided outside the sandbox.

    from envs.code import grade
    verdict = grade(solution_code, problem.reference)          # a Verdict
    verdict.reward, verdict.info["fraction"], verdict.steps     # binary, fraction, per test

How each kind of suite runs and is judged lives in its grader (`envs.code.graders.GRADERS`):
``function`` suites compare serialised return values here with expected values that never left
this process; ``stdio`` suites compare stdout here; ``program`` suites (dataset tests that are
programs) run in a tester process that reaches the candidate only through a data-only channel
(`envs.code.tester`). Every job of a batch goes through one ``backend.run_many``.

Outcome rules:
- ``reward`` is 1.0 when every test passes, else 0.0 (``reward="fraction"`` gives the fraction);
  ``info["fraction"]`` and ``steps`` (one `StepReward` per test over the code's span) are always
  there: the process reward.
- A program that crashes, hangs, exceeds memory or floods output fails the tests it did not
  answer: status ``ok``, a wrong answer like any other, with ``info["exec_status"]`` saying why.
- A failure of the sandbox itself (status ``error`` execution) or of the grading (the problem's
  own test code, the tester's isolation) is a verdict with status ``error``, never a silent 0.
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

import sandboxes
from envs.code.graders import GRADERS, Grader, Judgement, Run
from envs.code.testcases import TestSuite
from envs.types import StepReward, Verdict

RewardMode = Literal["binary", "fraction"]
DEFAULT_LIMITS = sandboxes.Limits(wall_s=10.0, cpu_s=10.0, memory_mb=512, output_bytes=1 << 20)


def program_for(solution: str, suite: TestSuite) -> str:
    """The candidate's module source: setup code, then the prompt prefix (or only its imports when
    the solution defines the entry point itself), then the solution, then the suite's test setup."""
    parts = [suite.setup] if suite.setup else []
    if suite.prefix:
        defines_entry = suite.entry_point and re.search(rf"^\s*def\s+{re.escape(suite.entry_point)}\s*\(", solution, re.M)
        if defines_entry:
            parts += [line for line in suite.prefix.splitlines() if re.match(r"\s*(import|from)\s", line)]
            parts.append(solution)
        else:
            parts.append(suite.prefix + solution)
    else:
        parts.append(solution)
    if suite.test_setup:
        parts.append(suite.test_setup)
    return "\n".join(parts)


def grade(solution: str, tests: TestSuite | dict, *, backend: sandboxes.Backend | None = None,
          limits: sandboxes.Limits | None = None, reward: RewardMode = "binary", span: tuple[int, int] | None = None) -> Verdict:
    """Run ``solution`` against ``tests`` in a sandbox and judge it here.

    Args:
        solution: Python source (a full program for stdio tests; a module defining, or code
            continuing the prefix of, the entry point for function tests).
        tests: A `TestSuite` or its dict form (a code problem's ``reference``).
        backend: Sandbox backend (default `sandboxes.default_backend()`).
        limits: Per-job limits (default `DEFAULT_LIMITS`).
        reward: ``"binary"`` (1.0 only when all tests pass) or ``"fraction"``.
        span: Character span of the code in the completion, for the per-test `StepReward`s.
    """
    return grade_many([solution], [tests], backend=backend, limits=limits, reward=reward, spans=[span])[0]


def grade_many(solutions: Sequence[str], suites: Sequence[TestSuite | dict], *, backend: sandboxes.Backend | None = None,
               limits: sandboxes.Limits | None = None, reward: RewardMode = "binary",
               spans: Sequence[tuple[int, int] | None] | None = None) -> list[Verdict]:
    """`grade` for a batch: every sandbox job of the batch runs through ``backend.run_many``
    (concurrently, on warm workers for the local backend)."""
    if len(solutions) != len(suites):
        raise ValueError(f"grade_many: {len(solutions)} solutions but {len(suites)} test suites")
    if reward not in ("binary", "fraction"):
        raise ValueError(f"reward must be 'binary' or 'fraction', got {reward!r}")
    backend = backend or sandboxes.default_backend()
    limits = limits or DEFAULT_LIMITS
    parsed = [TestSuite.from_dict(s) for s in suites]
    spans = list(spans) if spans is not None else [None] * len(solutions)
    graders = [GRADERS.make(suite.kind) for suite in parsed]
    jobs: list[sandboxes.Job] = []
    owners: list[int] = []  # the item each job belongs to
    for k, (solution, suite, grader) in enumerate(zip(solutions, parsed, graders)):
        item_jobs = grader.jobs(program_for(solution, suite), suite, limits)
        jobs += item_jobs
        owners += [k] * len(item_jobs)
    executions = backend.run_many(jobs)
    per_item: dict[int, list[Run]] = {}
    for k, job, ex in zip(owners, jobs, executions):
        per_item.setdefault(k, []).append((job, ex))
    return [_verdict(suite, grader, per_item[k], reward, spans[k] or (0, len(solutions[k])))
            for k, (suite, grader) in enumerate(zip(parsed, graders))]


def _verdict(suite: TestSuite, grader: Grader, runs: list[Run], reward: RewardMode, span: tuple[int, int]) -> Verdict:
    errors = [ex for _, ex in runs if ex.status is sandboxes.ExecStatus.ERROR]
    if errors:
        return Verdict.error(f"sandbox failure: {errors[0].info.get('error', 'unknown')}", backend=errors[0].backend)
    judged: Judgement = grader.judge(suite, runs)
    if judged.error:
        return Verdict.error(judged.error, **judged.info)
    results, info = judged.results, dict(judged.info)
    passed_n = sum(r.passed for r in results)
    fraction = passed_n / len(results)
    all_passed = passed_n == len(results)
    info.update(passed_tests=passed_n, total_tests=len(results), fraction=fraction,
                tests=[{"passed": r.passed, **({"detail": r.detail} if r.detail else {})} for r in results[:50]])
    steps = tuple(StepReward(span[0], span[1], 1.0 if r.passed else 0.0, f"test {i}: {label}") for i, (r, label) in enumerate(zip(results, judged.labels)))
    value = 1.0 if all_passed else 0.0
    return Verdict(reward=value if reward == "binary" else fraction, passed=all_passed, steps=steps, info=info)
