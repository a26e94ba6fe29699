"""Grading a solution against a `TestSuite`, with the verdict decided outside the sandbox.

    from envs.code import grade
    verdict = grade(solution_code, problem.reference)          # a Verdict
    verdict.reward, verdict.info["fraction"], verdict.steps     # binary, fraction, per test

Function tests: one sandbox job runs `envs.code.driver` over every test and returns the
candidate's serialised return values; this module decodes them (data only) and compares them
with the expected values, which never left this process. Stdio tests: one job per test; the
program's stdout is compared here.

Outcome rules:
- ``reward`` is 1.0 when every test passes, else 0.0 (``reward="fraction"`` gives the fraction);
  ``info["fraction"]`` and ``steps`` (one `StepReward` per test over the code's span) are always
  there: the process reward.
- A program that crashes, hangs, exceeds memory or floods output fails the tests it did not
  answer: status ``ok``, a wrong answer like any other, with ``info["exec_status"]`` saying why.
- A failure of the sandbox itself (status ``error`` execution, unparseable channel from a
  program that did not misbehave) is a verdict with status ``error``, never a silent 0.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import sandboxes
from envs.code import values
from envs.code.driver import CANDIDATE_FILE, DRIVER, INPUTS_FILE, RECORD_PREFIX
from envs.code.testcases import FunctionTest, StdioTest, TestSuite, apply_transform, normalise_stdout
from envs.types import StepReward, Verdict

RewardMode = Literal["binary", "fraction"]
DEFAULT_LIMITS = sandboxes.Limits(wall_s=10.0, cpu_s=10.0, memory_mb=512, output_bytes=1 << 20)


@dataclass(frozen=True)
class TestResult:
    """One test's outcome: ``passed``, and a short ``detail`` for people (never the expected value
    shown to a policy: verdict info is for logs)."""

    __test__ = False

    passed: bool
    detail: str = ""


def program_for(solution: str, suite: TestSuite) -> str:
    """The candidate's module source: setup code, then the prompt prefix (or only its imports when
    the solution defines the entry point itself), then the solution."""
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
    return "\n".join(parts)


def _function_job(program: str, suite: TestSuite, limits: sandboxes.Limits) -> sandboxes.Job:
    spec = {"entry_point": suite.entry_point, "args": [t.args for t in suite.tests]}  # inputs only
    return sandboxes.Job.make(DRIVER, files={CANDIDATE_FILE: program, INPUTS_FILE: json.dumps(spec)}, limits=limits)


def _judge_function(execution: sandboxes.Execution, suite: TestSuite) -> tuple[list[TestResult], dict[str, Any]]:
    tests: Sequence[FunctionTest] = suite.tests  # type: ignore[assignment]
    records: dict[int, dict] = {}
    info: dict[str, Any] = {}
    duplicated = False
    for line in execution.stdout.decode("utf-8", "replace").split("\n"):
        if not line.startswith(RECORD_PREFIX):
            continue
        try:
            rec = json.loads(line[len(RECORD_PREFIX):])
        except json.JSONDecodeError:
            continue  # a truncated last line (output limit) or candidate noise
        if not isinstance(rec, dict):
            continue
        if "load_error" in rec:
            info["load_error"] = str(rec["load_error"])[:300]
            continue
        i = rec.get("i")
        if type(i) is not int or not 0 <= i < len(tests):
            continue
        duplicated |= i in records
        records[i] = rec
    if duplicated:  # only a program writing to the channel itself does this: nothing counts
        info["channel"] = "duplicate records: run rejected"
        return [TestResult(False, "rejected: duplicate records") for _ in tests], info
    results = []
    for i, test in enumerate(tests):
        rec = records.get(i)
        if rec is None:
            results.append(TestResult(False, "no result (crashed, exited or timed out before this test)"))
        elif "e" in rec:
            results.append(TestResult(False, f"raised {str(rec['e'])[:120]}"))
        else:
            try:
                actual = values.decode(rec.get("v"))
            except values.DecodeError as e:
                results.append(TestResult(False, f"unreadable return value: {e}"))
                continue
            actual = apply_transform(actual, test.transform)
            ok = values.values_equal(actual, test.expected,
                                     rel_tol=values.REL_TOL if test.rel_tol is None else test.rel_tol,
                                     abs_tol=values.ABS_TOL if test.abs_tol is None else test.abs_tol)
            results.append(TestResult(ok, "" if ok else f"returned {_short(actual)}"))
    return results, info


def _judge_stdio(execution: sandboxes.Execution, test: StdioTest) -> TestResult:
    if execution.status is not sandboxes.ExecStatus.OK:
        return TestResult(False, execution.status.value)
    if execution.exit_code != 0:
        return TestResult(False, f"exit code {execution.exit_code}")
    ok = normalise_stdout(execution.stdout.decode("utf-8", "replace")) == normalise_stdout(test.stdout)
    return TestResult(ok, "" if ok else "wrong output")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    jobs: list[sandboxes.Job] = []
    owners: list[tuple[int, int]] = []  # (item, test index or -1 for a function job)
    for k, (solution, suite) in enumerate(zip(solutions, parsed)):
        if suite.kind == "function":
            jobs.append(_function_job(program_for(solution, suite), suite, limits))
            owners.append((k, -1))
        else:
            program = program_for(solution, suite)
            for j, t in enumerate(suite.tests):
                jobs.append(sandboxes.Job.make(program, stdin=t.stdin, limits=limits))
                owners.append((k, j))
    executions = backend.run_many(jobs)
    per_item: dict[int, list[tuple[int, sandboxes.Execution]]] = {}
    for (k, j), ex in zip(owners, executions):
        per_item.setdefault(k, []).append((j, ex))
    verdicts = []
    for k, suite in enumerate(parsed):
        verdicts.append(_verdict(suite, per_item[k], reward, spans[k] or (0, len(solutions[k]))))
    return verdicts


def _verdict(suite: TestSuite, runs: list[tuple[int, sandboxes.Execution]], reward: RewardMode, span: tuple[int, int]) -> Verdict:
    errors = [ex for _, ex in runs if ex.status is sandboxes.ExecStatus.ERROR]
    if errors:
        return Verdict.error(f"sandbox failure: {errors[0].info.get('error', 'unknown')}", backend=errors[0].backend)
    info: dict[str, Any] = {}
    if suite.kind == "function":
        ex = runs[0][1]
        results, extra = _judge_function(ex, suite)
        info.update(extra)
        info["exec_status"] = ex.status.value
        info["wall_s"] = ex.wall_s
        if ex.stderr:
            info["stderr_tail"] = ex.stderr[-500:].decode("utf-8", "replace")
        labels = [t.label(suite.entry_point) for t in suite.tests]  # type: ignore[union-attr]
    else:
        ordered = sorted(runs, key=lambda r: r[0])
        results = [_judge_stdio(ex, suite.tests[j]) for j, ex in ordered]  # type: ignore[arg-type]
        statuses = sorted({ex.status.value for _, ex in ordered})
        info["exec_status"] = statuses[0] if len(statuses) == 1 else statuses
        labels = [f"stdin #{j}" for j, _ in ordered]
    passed_n = sum(r.passed for r in results)
    fraction = passed_n / len(results)
    all_passed = passed_n == len(results)
    info.update(passed_tests=passed_n, total_tests=len(results), fraction=fraction,
                tests=[{"passed": r.passed, **({"detail": r.detail} if r.detail else {})} for r in results[:50]])
    steps = tuple(StepReward(span[0], span[1], 1.0 if r.passed else 0.0, f"test {i}: {label}") for i, (r, label) in enumerate(zip(results, labels)))
    value = 1.0 if all_passed else 0.0
    return Verdict(reward=value if reward == "binary" else fraction, passed=all_passed, steps=steps, info=info)
