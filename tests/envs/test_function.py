"""Reward functions as environments (`envs.from_function`) and the checkers one import away
(`envs.rewards`): verdicts from plain return values, containment, pools, pickling, registration,
self-check hooks."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

import envs
from envs.base import safe_verify
from envs.checks import check_environment
from envs.pool import VerifierPool
from envs.rewards import code_tests, math_answer
from envs.testing import faulty_reward
from envs.types import Problem, Status, Verdict
from rlvr.cli import main

PROBLEM = Problem(id="t/0", prompt="What is 2+2?", reference="4")


def exact(problem: Problem, completion: str) -> bool:
    """Whether the completion is exactly the reference."""
    return completion.strip() == str(problem.reference)


@pytest.fixture
def unregister():
    ids: list[str] = []
    yield ids.append
    for id in ids:
        envs.ENVS.unregister(id)


def test_return_values_become_verdicts():
    values = {"yes": True, "no": False, "half": 0.5, "full": 1.0, "np": np.float32(1.0), "npbool": np.bool_(True), "none": None,
              "verdict": Verdict(0.3, True, extracted="x")}
    env = envs.from_function(lambda p, c: values[c], pass_reward=1.0)
    got = {c: safe_verify(env, PROBLEM, c) for c in values}
    assert (got["yes"].reward, got["yes"].passed, got["yes"].status) == (1.0, True, Status.OK)
    assert (got["no"].reward, got["no"].passed, got["no"].status) == (0.0, False, Status.OK)
    assert (got["half"].reward, got["half"].passed) == (0.5, False)  # below pass_reward: not a pass
    assert (got["full"].reward, got["full"].passed) == (1.0, True)
    assert (got["np"].reward, got["np"].passed) == (1.0, True) and (got["npbool"].reward, got["npbool"].passed) == (1.0, True)
    assert got["none"].status is Status.NO_ANSWER
    assert (got["verdict"].reward, got["verdict"].passed, got["verdict"].extracted) == (0.3, True, "x")
    assert envs.from_function(lambda p, c: 0.5, pass_reward=0.5).verify(PROBLEM, "x").passed


@pytest.mark.parametrize("completion,reason", [("boom", "RuntimeError: reward function exploded"), ("nan", "not a finite reward"),
                                               ("text", "returned a str; return a float, a bool")])
def test_a_crash_or_a_value_that_is_not_a_reward_is_an_error_verdict(completion, reason):
    verdict = safe_verify(envs.from_function(faulty_reward), PROBLEM, completion)
    assert verdict.status is Status.ERROR and reason in verdict.info["error"]  # an error, never a reward of 0 for a wrong answer


def test_a_module_level_function_runs_in_worker_processes_and_a_hang_is_a_timeout():
    env = envs.from_function(faulty_reward)
    with VerifierPool(env, workers=2, kind="process", timeout_s=2.0) as pool:
        verdicts = pool.verify([PROBLEM] * 4, ["4", "5", "hang", "boom"])
        assert [v.status for v in verdicts] == [Status.OK, Status.OK, Status.TIMEOUT, Status.ERROR]
        assert [v.passed for v in verdicts[:2]] == [True, False]
        assert pool.verify([PROBLEM], ["4"])[0].passed  # the hung worker was replaced


def test_a_lambda_works_in_threads_and_is_refused_for_processes_in_one_line():
    env = envs.from_function(lambda p, c: c == p.reference)

    def closure(p, c):
        return True

    for fn, kind in ((env.fn, "a lambda"), (closure, "defined inside another function")):
        with pytest.raises(TypeError) as e:
            pickle.dumps(envs.from_function(fn))
        message = str(e.value)
        assert kind in message and "define it with `def` at the top level of a module" in message and "\n" not in message
    with VerifierPool(env, workers=1, kind="thread", timeout_s=5) as pool:
        assert pool.verify([PROBLEM], ["4"])[0].passed
    with VerifierPool(env, workers=1, kind="process", timeout_s=5) as pool:
        verdict = pool.verify([PROBLEM], ["4"])[0]
    assert verdict.status is Status.ERROR and "is a lambda" in verdict.info["error"]
    with pytest.raises(TypeError, match="gold hook test_a_lambda.*<lambda> is a lambda"):
        pickle.dumps(envs.from_function(exact, gold=lambda p: p.reference))
    assert pickle.loads(pickle.dumps(envs.from_function(exact))).verify(PROBLEM, "4").passed


def test_batched_function_gets_whole_batches_and_one_bad_value_fails_only_its_item():
    batches: list[int] = []

    def scores(problems, completions):
        batches.append(len(completions))
        return [{"4": 1.0, "x": "junk"}.get(c, 0.0) for c in completions]

    env = envs.from_function(scores, batched=True)
    with VerifierPool(env, workers=1, kind="thread", timeout_s=5) as pool:
        verdicts = pool.verify([PROBLEM] * 3, ["4", "x", "5"])
    assert batches == [3]
    assert [v.status for v in verdicts] == [Status.OK, Status.ERROR, Status.OK] and [v.reward for v in verdicts] == [1.0, 0.0, 0.0]



def test_a_batched_result_of_the_wrong_shape_is_an_error_verdict_naming_the_mismatch():
    calls: list[int] = []

    def counted(result):
        def fn(problems, completions):
            calls.append(len(completions))
            return result(len(completions))
        return fn

    cases = {"returned 2 values for 3 completions": lambda n: [1.0] * (n - 1),
             "returned 4 values for 3 completions": lambda n: [1.0] * (n + 1),
             "returned a single float for 3 completions": lambda n: 0.5,
             "returned a dict (3 keys) for 3 completions": lambda n: {i: 1.0 for i in range(n)}}
    for why, result in cases.items():
        calls.clear()
        env = envs.from_function(counted(result), batched=True)
        with VerifierPool(env, workers=1, kind="thread", timeout_s=5) as pool:
            verdicts = pool.verify([PROBLEM] * 3, ["a", "b", "c"])
        assert calls == [3], (why, calls)  # not called again item by item (which hid the mismatch)
        assert [v.status for v in verdicts] == [Status.ERROR] * 3 and all(why in v.info["error"] for v in verdicts), (why, verdicts)
    one = envs.from_function(lambda ps, cs: [0.5], batched=True)  # a list of one for a batch of one is right
    assert one.verify(PROBLEM, "a").reward == 0.5
    assert envs.from_function(lambda ps, cs: (1.0 for _ in ps), batched=True).verify_many([PROBLEM] * 2, ["a", "b"])[1].passed


def test_bad_functions_and_options_are_refused_when_wrapped():
    with pytest.raises(TypeError, match="reward function 'f' must accept 2 positional"):
        def f(completion):
            return 1.0
        envs.from_function(f)
    with pytest.raises(TypeError, match="must be a function"):
        envs.from_function("math-v1")
    with pytest.raises(ValueError, match="pass_reward must be a finite number"):
        envs.from_function(exact, pass_reward=math.nan)


def test_registered_function_is_made_by_id_and_replaces_only_its_own(unregister):
    unregister("test/exact-v1")
    env = envs.from_function(exact, id="test/exact-v1")
    assert env.id == "test/exact-v1" and envs.make("test/exact-v1").verify(PROBLEM, "4").passed
    assert envs.ENVS.spec("test/exact").description == "Whether the completion is exactly the reference."
    envs.from_function(lambda p, c: 0.0, id="test/exact-v1")  # a re-run notebook cell replaces it
    assert envs.make("test/exact-v1").verify(PROBLEM, "4").reward == 0.0
    with pytest.raises(envs.RegistryError, match="'math-v1' is already registered"):
        envs.from_function(exact, id="math-v1")
    with pytest.raises(envs.RegistryError, match="has no version"):
        envs.from_function(exact, id="test/exact")


def test_decorator_registers_and_leaves_the_function(unregister):
    unregister("test/decorated-v1")

    @envs.reward_function("test/decorated-v1", pass_reward=0.5)
    def near(problem, completion):
        return 0.5

    assert near(PROBLEM, "x") == 0.5
    assert envs.make("test/decorated-v1").verify(PROBLEM, "x").passed


def test_envs_check_uses_the_hooks_given(unregister, capsys):
    examples = [Problem(id=f"ex/{i}", prompt=f"What is {i}+{i}?", reference=str(2 * i)) for i in range(3)]
    hooks = dict(gold=lambda p: p.reference, wrong=lambda p: [str(int(p.reference) + 1)], examples=examples)
    assert check_environment(envs.from_function(exact, **hooks), [], timeout_s=10).passed
    lenient = envs.from_function(lambda p, c: p.reference in c, **hooks)  # gameable: any text that contains the answer
    failed = [r.name for r in check_environment(lenient, [], timeout_s=10).results if not (r.passed or r.skipped)]
    assert failed, "a reward that a wrong answer can game must fail the checks"
    unregister("test/checked-v1")
    envs.from_function(exact, id="test/checked-v1", **hooks)
    assert main(["envs", "check", "test/checked-v1"]) == 0
    assert "all checks passed" in capsys.readouterr().out


def test_the_math_and_code_checkers_are_one_import_away():
    assert math_answer("so the answer is \\boxed{\\frac{1}{2}}", "0.5").passed
    assert not math_answer("Answer: 3", "4").passed
    assert math_answer("I think it is four.\nNot sure.", "4").status is Status.NO_ANSWER
    solution = "```python\ndef add(a, b):\n    return a + b\n```"
    assert code_tests(solution, "assert add(2, 3) == 5\nassert add(-1, 1) == 0", entry_point="add").passed
    assert not code_tests(solution.replace("a + b", "a - b"), "assert add(2, 3) == 5", entry_point="add").passed
    assert code_tests("```python\nprint(int(input()) * 2)\n```", [{"stdin": "21\n", "stdout": "42\n"}]).passed
    with pytest.raises(ValueError, match="need entry_point"):
        code_tests(solution, "assert add(2, 3) == 5")


def test_a_built_in_id_is_refused_before_the_built_ins_have_loaded():
    # a fresh process: nothing has listed the registries yet, so their plugins (the built-ins) are not loaded
    import subprocess
    import sys

    script = ("import envs, tasks\n"
              "for make in (lambda: envs.from_function(lambda p, c: 1.0, id='math-v1'),\n"
              "             lambda: tasks.from_dataset([{'question': f'q{i}', 'answer': '1'} for i in range(40)], id='gsm8k-v1')):\n"
              "    try:\n        make()\n    except Exception as e:\n        print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "'math-v1' is already registered" in out.stdout, out.stdout + out.stderr
    assert "'gsm8k-v1' is already registered" in out.stdout, out.stdout + out.stderr


def test_a_reward_beyond_float32_is_an_error_verdict_not_an_inf_that_trains_nothing():
    huge = envs.from_function(lambda problem, completion: 1e300)
    verdict = safe_verify(huge, PROBLEM, "4")
    assert verdict.status == Status.ERROR and "finite in float32" in verdict.info["error"]
    assert safe_verify(envs.from_function(lambda problem, completion: -3e38), PROBLEM, "4").reward == -3e38  # within range
    batch = envs.from_function(lambda problems, completions: [1.0, 1e39], batched=True)
    with VerifierPool(batch, workers=1, kind="thread", timeout_s=5) as pool:
        verdicts = pool.verify([PROBLEM] * 2, ["a", "b"])
    assert [v.status for v in verdicts] == [Status.OK, Status.ERROR] and "finite in float32" in verdicts[1].info["error"]
