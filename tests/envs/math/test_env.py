import pickle

import pytest

import envs
import tasks
from envs.checks import check_environment
from envs.math import MathEnv, check
from envs.pool import VerifierPool
from envs.types import Problem, Status


def test_math_v1_is_registered_lazily_and_builds_the_full_checker():
    spec = envs.ENVS.spec("math-v1")
    assert spec.entry_point == "envs.math.env:MathEnv"
    env = envs.make("math-v1")
    assert isinstance(env, MathEnv) and env.id == "math-v1"
    p = Problem("p", "1/2?", "\\frac{1}{2}")
    assert env.verify(p, "\\boxed{0.5}").passed


def test_self_checks_pass_on_examples_and_arithmetic():
    assert check_environment(MathEnv(), []).passed
    task = tasks.make("arithmetic-v1")
    assert check_environment(task.env, task.problems("validation", limit=20)).passed


def test_strictness_is_configurable():
    p = Problem("p", "q", "14")
    prose = "We double 7 and get 14.\nThat is all."
    assert MathEnv().verify(p, prose).status is Status.NO_ANSWER
    assert MathEnv(extraction="lenient").verify(p, prose).passed
    assert envs.make("math-v1", extraction="lenient").extraction == "lenient"  # selectable by env_kwargs


def test_arguments_are_validated():
    with pytest.raises(ValueError, match="timeout_s"):
        MathEnv(timeout_s=0)
    with pytest.raises(ValueError, match="rel_tol"):
        MathEnv(rel_tol=2)
    with pytest.raises(ValueError, match="extraction must be one of strict, lenient"):
        MathEnv(extraction="loose")


def test_check_never_raises_bad_arguments_are_error_verdicts():
    for response, gold, kwargs, field in [
        (None, "1", {}, "response"), ("\\boxed{1}", None, {}, "gold"), ("\\boxed{1}", "1", {"extraction": "loose"}, "extraction"),
        (b"\\boxed{1}", "1", {}, "response"),
    ]:
        v = check(response, gold, **kwargs)  # type: ignore[arg-type]
        assert v.status is Status.ERROR and not v.passed and field in v.info["error"]


def test_unparseable_gold_is_an_error_not_a_silent_zero():
    v = check("\\boxed{5}", "\\weird{3}")
    assert v.status is Status.ERROR and "gold answer could not be parsed" in v.info["error"]
    assert check("\\boxed{\\weird{3}}", "\\weird{3}").passed  # identical text still passes


def test_unparseable_response_fails_with_its_reason():
    v = check("Answer: \\frac{1}{}", "1")
    assert v.status is Status.OK and not v.passed and v.info["parse_error"]
    v = check("\\boxed{\\frac{1}{}", "1")  # not a box, so a bare line; one that does not parse is no answer
    assert v.status is Status.NO_ANSWER and not v.passed and v.info["parse_error"]


def test_amc_style_float_gold():
    assert check("\\boxed{27}", 27.0).passed
    assert check("\\boxed{27}", "27.0").passed


def test_env_pickles_and_verifies_in_process_and_thread_pools():
    env = envs.make("math-v1")
    assert pickle.loads(pickle.dumps(env)).extraction == "strict"
    problems = [Problem(f"p{k}", "q", g) for k, g in enumerate(["3", "\\frac{1}{\\sqrt2}", "x^2+2x+1", "(1,2)"] * 3)]
    completions = ["\\boxed{3}", "\\boxed{\\frac{\\sqrt2}{2}}", "\\boxed{(x+1)^2}", "\\boxed{(2,1)}"] * 3
    expected = [True, True, True, False] * 3
    for kind in ("thread", "process"):
        with VerifierPool(env, workers=2, kind=kind, timeout_s=60) as pool:
            verdicts = pool.verify(problems, completions)
        assert [v.passed for v in verdicts] == expected, kind
        assert all(v.status is Status.OK for v in verdicts)


def test_verify_many_matches_verify():
    env = MathEnv()
    problems = [Problem("a", "q", "4"), Problem("b", "q", "\\sqrt{2}")]
    completions = ["2+2=4\nAnswer: 4", "\\boxed{2}"]
    many = env.verify_many(problems, completions)
    assert [v.passed for v in many] == [env.verify(p, c).passed for p, c in zip(problems, completions)] == [True, False]
    assert many[0].steps[0].reward == 1.0
