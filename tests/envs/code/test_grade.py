import pytest

import envs
import sandboxes
from envs.code import FunctionTest, TestSuite, grade, grade_many, program_for
from envs.types import Problem, Status


@pytest.fixture(scope="module")
def backend():
    name = "local" if sandboxes.backend_spec("local").probe().ok else "process"
    if not sandboxes.backend_spec(name).probe().ok:
        pytest.skip("no sandbox backend available")
    b = sandboxes.make_backend(name)
    yield b
    b.close()


SUITE = TestSuite("function", (FunctionTest("[1, 2, 3]", 2.0), FunctionTest("[0.1, 0.2]", 0.15), FunctionTest("[5]", 5)), entry_point="mean")


def test_per_test_results_are_the_process_reward(backend):
    v = grade("def mean(xs):\n    return xs[0]\n", SUITE, backend=backend, span=(3, 30))
    assert not v.passed and v.reward == 0.0 and v.status is Status.OK
    assert [s.reward for s in v.steps] == [0.0, 0.0, 1.0] and v.info["fraction"] == pytest.approx(1 / 3)
    assert all((s.start, s.end) == (3, 30) for s in v.steps) and v.steps[0].label.startswith("test 0: mean([1, 2, 3])")
    frac = grade("def mean(xs):\n    return xs[0]\n", SUITE, backend=backend, reward="fraction")
    assert frac.reward == pytest.approx(1 / 3) and not frac.passed
    good = grade("def mean(xs):\n    return sum(xs) / len(xs)\n", SUITE, backend=backend)
    assert good.passed and good.reward == 1.0 and good.info["fraction"] == 1.0


def test_crashes_hangs_and_partial_output(backend):
    limits = sandboxes.Limits(wall_s=2, cpu_s=2)
    hang_on_second = "def mean(xs):\n    if len(xs) == 2:\n        while True: pass\n    return sum(xs) / len(xs)\n"
    crash, hang = grade_many(["def mean(xs):\n    return 1 / 0\n", hang_on_second], [SUITE, SUITE], backend=backend, limits=limits)
    assert crash.info["tests"][0]["detail"].startswith("raised ZeroDivisionError") and crash.status is Status.OK
    assert [s.reward for s in hang.steps] == [1.0, 0.0, 0.0] and hang.info["exec_status"] == "timeout" and hang.status is Status.OK
    syntax = grade("def mean(xs) return 1", SUITE, backend=backend)
    assert not syntax.passed and "SyntaxError" in syntax.info["load_error"]


def test_sandbox_failure_is_an_error_verdict():
    if not sandboxes.backend_spec("local").probe().ok:
        pytest.skip("local backend unavailable")
    broken = sandboxes.make_backend("local", workers=1, python="/nonexistent/python3")
    try:
        v = grade("def mean(xs):\n    return 2.0\n", SUITE, backend=broken)
    finally:
        broken.close()
    assert v.status is Status.ERROR and not v.passed and "sandbox failure" in v.info["error"]


def test_prompt_prefix_and_setup():
    suite = TestSuite("function", (FunctionTest("1", 2),), entry_point="f", prefix="from typing import List\n\ndef f(x: int) -> int:\n", setup="K = 1")
    assert program_for("    return x + K\n", suite) == "K = 1\nfrom typing import List\n\ndef f(x: int) -> int:\n    return x + K\n"
    full = program_for("def f(x):\n    return x + K\n", suite)
    assert full == "K = 1\nfrom typing import List\ndef f(x):\n    return x + K\n"


def test_code_env_batches_and_marks_missing_code(backend):
    env = envs.make("code-v1")
    env._backend = (__import__("os").getpid(), backend)
    p = Problem("p", "mean", SUITE.to_dict())
    verdicts = env.verify_many([p, p, p], ["```python\ndef mean(xs):\n    return sum(xs) / len(xs)\n```", "", "I don't know"])
    assert verdicts[0].passed and verdicts[0].extracted.startswith("def mean")
    assert verdicts[1].status is Status.NO_ANSWER and not verdicts[2].passed
    bad = env.verify(Problem("q", "x", {"kind": "nope"}), "def f(): pass")
    assert bad.status is Status.ERROR and "malformed reference" in bad.info["error"]
    import pickle
    clone = pickle.loads(pickle.dumps(env))  # environments go to worker processes: the backend does not
    assert clone._backend is None
