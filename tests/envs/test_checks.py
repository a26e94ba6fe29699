"""`envs.checks.check_environment` judges the verifier, not only its verdicts: errors, malformed
verdicts and hangs fail the checks (and a hang stops them after one budget)."""

from __future__ import annotations

import pytest

import envs
import tasks
from envs.checks import check_environment
from envs.testing import BadVerdictEnv, FaultyStepEnv, FlakyEnv, HangingEnv


@pytest.fixture(scope="module")
def problems():
    return tasks.make("arithmetic-v1").problems("train", limit=4)


def test_a_working_verifier_passes(problems):
    report = check_environment(envs.make("math-v1"), problems)
    assert report.passed and not report.hung
    assert [r.name for r in report.results][-1] == "verifier works"


def test_a_verifier_that_always_raises_fails_every_check(problems):
    report = check_environment(FlakyEnv(always_raise=True), problems)
    assert not report.passed
    failed = {r.name: r.detail for r in report.results if not r.passed}
    assert set(failed) == {"gold passes", "perturbed answers fail", "empty answer fails", "echo of the prompt fails", "deterministic", "verifier works"}
    assert "was not judged (error: RuntimeError: flaky verifier failed" in failed["empty answer fails"]


def test_a_nan_verdict_is_an_error_not_a_determinism_failure(problems):
    report = check_environment(BadVerdictEnv(bad="nan"), problems)
    assert not report.passed
    detail = {r.name: r.detail for r in report.results}
    assert "invalid verdict: reward must be finite, got nan" in detail["verifier works"]
    assert "differ" not in detail["deterministic"]


def test_a_hanging_verifier_stops_the_checks_after_one_budget(problems):
    report = check_environment(HangingEnv(every=1), problems, timeout_s=0.5)
    assert report.hung and not report.passed
    last = report.results[-1]
    assert last.name == "verification finishes" and "did not finish within 0.5 s" in last.detail
    assert "not run: gold passes, perturbed answers fail" in last.detail


# -- multi-turn environments: a scripted episode through step() (issue 22: step was never called)


def test_a_multi_turn_environment_whose_steps_work_passes(problems):
    report = check_environment(FaultyStepEnv(fault=""), problems)
    assert report.passed, report.results
    assert next(r for r in report.results if r.name == "steps work").detail == "4/4 ok"


@pytest.mark.parametrize("fault, reason", [
    ("raise", "step failed: RuntimeError: step exploded"),
    ("junk", "step failed: TypeError: FaultyStepEnv.step returned an observation of type dict, expected str or None"),
])
def test_a_step_that_raises_or_returns_junk_fails_the_checks(fault, reason, problems):
    report = check_environment(FaultyStepEnv(fault=fault), problems)
    assert not report.passed and not report.hung
    steps = next(r for r in report.results if r.name == "steps work")
    assert not steps.passed and steps.detail.startswith("0/4 ok") and reason in steps.detail


def test_a_step_that_never_returns_stops_the_checks_after_one_budget(problems):
    report = check_environment(FaultyStepEnv(fault="hang"), problems, timeout_s=0.5)
    assert report.hung and not report.passed
    last = report.results[-1]
    assert last.name == "step finishes" and "step on " in last.detail and "did not return within 0.5 s" in last.detail


def test_the_tool_environment_passes_with_a_real_tool_call():
    task = tasks.make("tool-products-v1")
    report = check_environment(task.env, task.problems("validation", limit=2))
    assert report.passed, [(r.name, r.detail) for r in report.results if not r.passed]
    assert "steps work" in [r.name for r in report.results]


def test_self_check_hooks_that_raise_are_failures_not_crashes(problems):
    class BadHooks(FlakyEnv):
        def gold_completion(self, problem):
            raise KeyError("no gold")

    report = check_environment(BadHooks(raise_every=0), problems)
    gold = next(r for r in report.results if r.name == "gold passes")
    assert not gold.passed and "gold_completion() raised KeyError" in gold.detail


def test_an_echo_of_the_prompt_must_fail(problems):
    from envs.math import MathEnv, check

    class Gullible(MathEnv):
        """Credits any expression of the gold's value and never looks at the question."""

        def verify(self, problem, completion):
            return check(completion, problem.reference, numeric_literal=False)

    report = check_environment(Gullible(), problems)
    echo = next(r for r in report.results if r.name == "echo of the prompt fails")
    assert not echo.passed and "an echo of the prompt passed" in echo.detail and not report.passed
    math = check_environment(envs.make("math-v1"), problems)
    echo = next(r for r in math.results if r.name == "echo of the prompt fails")
    assert echo.passed and not echo.skipped and echo.detail.startswith("4/4 ok")


def test_math_echoes_are_the_question_and_its_expressions(problems):
    p = problems[0]
    expr = f"{p.metadata['a']}{p.metadata['op']}{p.metadata['b']}"
    echoes = envs.make("math-v1").echo_completions(p)
    assert echoes[0] == p.prompt and {expr, f"{expr}.", f"Answer: {expr}", f"\\boxed{{{expr}}}"} <= set(echoes)
