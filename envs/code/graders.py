"""How each kind of test suite is run and judged: `GRADERS`, by `TestSuite.kind`.

A grader turns a candidate's program and a suite into sandbox jobs, and the jobs' executions into
one `TestResult` per test, decided here on the trusted side:

- ``function``: one job runs `envs.code.driver`, which calls the entry point with each test's
  arguments and sends back the serialised return values; they are decoded (data only) and
  compared here with the expected values, which never leave this process.
- ``stdio``: one job per test; the program's stdout is compared here.
- ``program``: one job runs the dataset's test code in a tester process that calls the candidate,
  in a process of its own, through a data-only channel (`envs.code.tester`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import sandboxes
from envs.code import values
from envs.code.driver import CANDIDATE_FILE, DRIVER, INPUTS_FILE, RECORD_PREFIX
from envs.code.testcases import FunctionTest, StdioTest, TestSuite, apply_transform, normalise_stdout
from envs.registry import Registry


@dataclass(frozen=True)
class TestResult:
    """One test's outcome: ``passed``, and a short ``detail`` for people (never the expected value
    shown to a policy: verdict info is for logs)."""

    __test__ = False

    passed: bool
    detail: str = ""


@dataclass(frozen=True)
class Judgement:
    """What a grader concluded from one problem's executions.

    Attributes:
        results: One per test, in order.
        labels: One per test, for the per-test `StepReward`s.
        info: Details for logs (how the program ended, load errors, channel problems).
        error: Set when grading itself failed (the problem's own test code, the tester's
            isolation): the verdict is then an ``error``, never a wrong answer.
    """

    results: list[TestResult]
    labels: list[str]
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


Run = tuple[sandboxes.Job, sandboxes.Execution]


class Grader(ABC):
    """Runs and judges one kind of test suite (stateless: one instance serves every problem)."""

    @abstractmethod
    def jobs(self, program: str, suite: TestSuite, limits: sandboxes.Limits) -> list[sandboxes.Job]:
        """The sandbox jobs that test ``program`` (the candidate's module source, `program_for`)."""

    @abstractmethod
    def judge(self, suite: TestSuite, runs: Sequence[Run]) -> Judgement:
        """Per-test results from the jobs (in the order `jobs` made them) and their executions.
        Only called when no execution is a sandbox ``ERROR``."""


GRADERS: Registry[Grader] = Registry("test suite kind", versioned=False)
"""The grader of each `TestSuite.kind`."""


def read_records(stdout: bytes) -> list[dict[str, Any]]:
    """The JSON objects on the lines of ``stdout`` that start with `RECORD_PREFIX`; anything else
    (a truncated last line, noise) is skipped."""
    records = []
    for line in stdout.decode("utf-8", "replace").split("\n"):
        if not line.startswith(RECORD_PREFIX):
            continue
        try:
            record = json.loads(line[len(RECORD_PREFIX):])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def execution_info(ex: sandboxes.Execution) -> dict[str, Any]:
    """How a one-job run ended, for `Judgement.info`."""
    info: dict[str, Any] = {"exec_status": ex.status.value, "wall_s": ex.wall_s}
    if ex.stderr:
        info["stderr_tail"] = ex.stderr[-500:].decode("utf-8", "replace")
    return info


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class FunctionGrader(Grader):
    """``function`` suites: return values judged here (see the module docstring)."""

    def jobs(self, program: str, suite: TestSuite, limits: sandboxes.Limits) -> list[sandboxes.Job]:
        tests: Sequence[FunctionTest] = suite.tests  # type: ignore[assignment]
        spec = {"entry_point": suite.entry_point, "args": [t.args for t in tests], "evaluated": [t.evaluated for t in tests]}  # inputs only
        return [sandboxes.Job.make(DRIVER, files={CANDIDATE_FILE: program, INPUTS_FILE: json.dumps(spec)}, limits=limits)]

    def judge(self, suite: TestSuite, runs: Sequence[Run]) -> Judgement:
        tests: Sequence[FunctionTest] = suite.tests  # type: ignore[assignment]
        execution = runs[0][1]
        info = execution_info(execution)
        labels = [t.label(suite.entry_point) for t in tests]
        by_test: dict[int, dict] = {}
        duplicated = False
        for rec in read_records(execution.stdout):
            if "load_error" in rec:
                info["load_error"] = str(rec["load_error"])[:300]
                continue
            i = rec.get("i")
            if type(i) is not int or not 0 <= i < len(tests):
                continue
            duplicated |= i in by_test
            by_test[i] = rec
        if duplicated:  # only a program writing to the channel itself does this: nothing counts
            info["channel"] = "duplicate records: run rejected"
            return Judgement([TestResult(False, "rejected: duplicate records") for _ in tests], labels, info)
        return Judgement([self._result(by_test.get(i), test) for i, test in enumerate(tests)], labels, info)

    @staticmethod
    def _result(rec: dict | None, test: FunctionTest) -> TestResult:
        if rec is None:
            return TestResult(False, "no result (crashed, exited or timed out before this test)")
        if "e" in rec:
            return TestResult(False, f"raised {str(rec['e'])[:120]}")
        try:
            actual = values.decode(rec.get("v"))
        except values.DecodeError as e:
            return TestResult(False, f"unreadable return value: {e}")
        actual = apply_transform(actual, test.transform)
        ok = values.values_equal(actual, test.expected,
                                 rel_tol=values.REL_TOL if test.rel_tol is None else test.rel_tol,
                                 abs_tol=values.ABS_TOL if test.abs_tol is None else test.abs_tol)
        return TestResult(ok, "" if ok else f"returned {_short(actual)}")


class StdioGrader(Grader):
    """``stdio`` suites: one job per test, stdout compared here."""

    def jobs(self, program: str, suite: TestSuite, limits: sandboxes.Limits) -> list[sandboxes.Job]:
        tests: Sequence[StdioTest] = suite.tests  # type: ignore[assignment]
        return [sandboxes.Job.make(program, stdin=t.stdin, limits=limits) for t in tests]

    def judge(self, suite: TestSuite, runs: Sequence[Run]) -> Judgement:
        tests: Sequence[StdioTest] = suite.tests  # type: ignore[assignment]
        results = [self._result(ex, test) for (_, ex), test in zip(runs, tests)]
        statuses = sorted({ex.status.value for _, ex in runs})
        info = {"exec_status": statuses[0] if len(statuses) == 1 else statuses}
        return Judgement(results, [f"stdin #{j}" for j in range(len(tests))], info)

    @staticmethod
    def _result(execution: sandboxes.Execution, test: StdioTest) -> TestResult:
        if execution.status is not sandboxes.ExecStatus.OK:
            return TestResult(False, execution.status.value)
        if execution.exit_code != 0:
            return TestResult(False, f"exit code {execution.exit_code}")
        ok = normalise_stdout(execution.stdout.decode("utf-8", "replace")) == normalise_stdout(test.stdout)
        return TestResult(ok, "" if ok else "wrong output")


GRADERS.register("function", FunctionGrader, description="return values of entry_point(*args), compared on the trusted side")
GRADERS.register("stdio", StdioGrader, description="a whole program's stdout for a given stdin, compared on the trusted side")
GRADERS.register("program", "envs.code.tester:TesterGrader",
                 description="the dataset's test code in a tester process; the candidate in another, behind a data-only channel")
