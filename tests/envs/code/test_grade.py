import pytest

import envs
import sandboxes
from envs.code import FunctionTest, TestSuite, grade, grade_many, program_for, split_test_program
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
    after = TestSuite("function", (FunctionTest("n", 2, evaluated=True),), entry_point="f", test_setup="n = Box(1)")
    assert program_for("class Box: ...", after) == "class Box: ...\nn = Box(1)"  # test setup sees the solution's classes


def test_arguments_built_from_the_solutions_own_classes(backend):
    suite = TestSuite("function", (FunctionTest("root", 3, evaluated=True), FunctionTest("Node(7, None)", 1, evaluated=True),
                                   FunctionTest("None", 0)), entry_point="depth", test_setup="root = Node(1, Node(2, Node(3, None)))")
    node = "class Node:\n    def __init__(self, v, nxt):\n        self.v, self.nxt = v, nxt\n"
    good, wrong, no_class = grade_many([node + "def depth(n):\n    return 0 if n is None else 1 + depth(n.nxt)\n",
                                        node + "def depth(n):\n    return 1\n", "def depth(n):\n    return 3\n"],
                                       [suite] * 3, backend=backend)
    assert good.passed and [s.reward for s in wrong.steps] == [0.0, 1.0, 0.0]
    assert not no_class.passed and "NameError" in no_class.info["load_error"]  # the test setup needs the solution's Node


ADD_TESTS = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    for i in range(50):\n        assert candidate(i, twice(i)) == 3 * i\n"
             "    assert add(-1, 1) == 0\n")


def program_suite(tests: str = ADD_TESTS, tester_setup: str = "def twice(x):\n    return 2 * x") -> TestSuite:
    setup, program_tests = split_test_program(tests)
    return TestSuite("program", program_tests, entry_point="add", tester_setup="\n".join(p for p in (tester_setup, setup) if p))


def test_program_suites_run_the_dataset_tests_in_the_tester(backend):
    suite = program_suite()
    good, loud, wrong_loop, raises, no_def = grade_many([
        "def add(a, b):\n    return a + b\n",
        "print('All tests passed')\ndef add(a, b):\n    print('3 passed')\n    return a + b\n",  # its prints never reach the channel
        "def add(a, b):\n    return a + b if b != 2 * a or a < 3 else 0\n",  # wrong inside the loop only
        "def add(a, b):\n    raise ValueError('no idea')\n",
        "x = 1\n",
    ], [suite] * 5, backend=backend)
    assert good.passed and good.status is Status.OK and good.info["calls"] == 52 and loud.passed
    assert [s.reward for s in wrong_loop.steps] == [1.0, 0.0, 1.0] and wrong_loop.steps[1].label == "test 1: for i in range(50):"
    assert not raises.passed and "the candidate raised ValueError: no idea" in raises.info["tests"][0]["detail"]
    assert not no_def.passed and "KeyError" in no_def.info["load_error"]


def test_tests_that_draw_random_inputs_give_the_same_verdict_every_time(backend):
    draw = "    x = random.randint(0, 1 << 30)\n    assert candidate(x, 0) == x\n"
    suite = program_suite("def check(candidate):\n    import random\n" + draw * 6)
    sometimes = "def add(a, b):\n    return a + b if a % 3 else 0\n"  # wrong for multiples of 3 only
    verdicts = grade_many([sometimes] * 4, [suite] * 4, backend=backend)
    assert len({tuple(s.reward for s in v.steps) for v in verdicts}) == 1, [[s.reward for s in v.steps] for v in verdicts]


def test_a_broken_problem_is_an_error_verdict_not_a_wrong_answer(backend):
    broken_setup = program_suite(tester_setup="raise RuntimeError('the dataset helper is broken')")
    not_data = program_suite("def check(candidate):\n    assert candidate(object(), 1) is None\n")
    a, b = grade_many(["def add(a, b):\n    return a + b\n"] * 2, [broken_setup, not_data], backend=backend)
    assert a.status is Status.ERROR and "setup error: RuntimeError: the dataset helper is broken" in a.info["error"]
    assert b.status is Status.ERROR and "not data" in b.info["error"]


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


def test_the_environment_self_check_passes_on_its_examples(backend):
    from envs.checks import check_environment

    env = envs.make("code-v1")
    env._backend = (__import__("os").getpid(), backend)
    assert any(TestSuite.from_dict(p.reference).kind == "program" for p in env.examples())
    report = check_environment(env, [])
    assert report.passed, [(r.name, r.detail) for r in report.results]


def test_program_suites_through_a_remote_sandbox_service(backend):
    from sandboxes.remote import RemoteBackend
    from sandboxes.server import serve_in_thread

    server, url = serve_in_thread(backend)
    try:
        good, wrong = grade_many(["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return 3\n"], [program_suite()] * 2,
                                 backend=RemoteBackend(url))
    finally:
        server.shutdown()
    assert good.passed and not wrong.passed and [s.reward for s in wrong.steps] == [1.0, 0.0, 0.0]
