import pytest

from envs.code import FunctionTest, ProgramTest, StdioTest, TestSuite, UnconvertibleTests, parse_asserts, split_test_program
from envs.code.extract import extract_code
from envs.code.testcases import normalise_stdout


def test_assert_forms_become_input_output_pairs():
    src = """
def check(candidate):
    assert candidate([1, 2], 3) == (4, 5)
    assert (4, 5) == candidate([], 0)
    assert abs(candidate(2.5) - 0.5) < 1e-6
    assert math.isclose(candidate(1), 2.0, rel_tol=0.01)
    assert set(candidate('ab')) == set(['a', 'b'])
    assert candidate(-1)
    assert not candidate(3 * 19)
    assert True, 'this prints if this assert fails'
    assert candidate(2.0 / 3.0) == 'x' + 'y'
"""
    tests = parse_asserts(src, {"candidate"})
    assert [t.args for t in tests] == ["[1, 2], 3", "[], 0", "2.5", "1", "'ab'", "-1", "57", "0.6666666666666666"]
    assert tests[0].expected == (4, 5) and tests[2].abs_tol == 1e-6 and tests[3].rel_tol == 0.01
    assert tests[4].transform == "set" and tests[4].expected == {"a", "b"}
    assert tests[5].transform == "bool" and tests[6].expected is False and tests[7].expected == "xy"


@pytest.mark.parametrize("src", [
    "for i in range(3):\n    assert f(i) == i",
    "assert f(x) == 1",
    "assert f(1) == helper(1)",
    "assert f(1) > 2",
    "import random\nassert f(random.random()) == 1",
    "",
])
def test_unconvertible_tests_are_refused(src):
    with pytest.raises(UnconvertibleTests):
        parse_asserts(src, {"f"})


def test_suites_round_trip_and_validate():
    suite = TestSuite("function", (FunctionTest("1, 'a'", (1, {"a"})), FunctionTest("", None, transform="bool")), entry_point="f",
                      prefix="def f(x):\n", setup="import math")
    assert TestSuite.from_dict(suite.to_dict()) == suite
    stdio = TestSuite("stdio", (StdioTest("1\n", "2\n"),))
    assert TestSuite.from_dict(stdio.to_dict()) == stdio
    with pytest.raises(ValueError, match="literals"):
        FunctionTest("os.system('x')", 1)
    with pytest.raises(ValueError, match="entry_point"):
        TestSuite("function", (FunctionTest("1", 1),), entry_point="not a name")
    with pytest.raises(ValueError, match="at least one test"):
        TestSuite("stdio", ())
    assert normalise_stdout("a  \r\nb\n\n\n") == ["a", "b"]


def test_code_extraction():
    assert extract_code("") is None and extract_code("  \n") is None
    c = extract_code("Here:\n```python\ndef f():\n    return 1\n```\nand\n```py\nx = 2\n```\n")
    assert c.code == "x = 2\n"
    text = "intro ```python\nprint(1)"  # unclosed fence runs to the end
    assert extract_code(text).code == "print(1)"
    raw = extract_code("x*2+1")
    assert (raw.code, raw.start, raw.end) == ("x*2+1", 0, 5)
    text = "a\n```\ny = 1\n```"
    found = extract_code(text)
    assert text[found.start:found.end] == found.code == "y = 1\n"


def test_arguments_that_are_objects_are_evaluated_next_to_the_candidate_only_when_asked():
    src = "assert chain([Pair(5, 24), Pair(15, 25)], 2) == 1\nassert drop((1, 2.5), int) == [2.5]\nassert f([1, 2]) == 3"
    with pytest.raises(UnconvertibleTests, match="not a literal"):
        parse_asserts(src, {"chain", "drop", "f"})
    pair, typed, plain = parse_asserts(src, {"chain", "drop", "f"}, evaluated_args=True)
    assert (pair.args, pair.evaluated, pair.expected) == ("[Pair(5, 24), Pair(15, 25)], 2", True, 1)
    assert typed.evaluated and typed.args == "(1, 2.5), int" and not plain.evaluated
    assert FunctionTest.from_dict(pair.to_dict()) == pair and "evaluated" not in plain.to_dict()
    with pytest.raises(ValueError, match="expression list"):
        FunctionTest("x y", 1, evaluated=True)
    # the expected value must still be a literal: it is what stays on the trusted side
    with pytest.raises(UnconvertibleTests, match="expected value"):
        parse_asserts("assert f(root) == g(root)", {"f"}, evaluated_args=True)


def test_a_bare_name_statement_is_ignored():  # HumanEval/129 has a stray `print` without a call
    assert [t.args for t in parse_asserts("def check(candidate):\n    print\n    assert candidate(1) == 2\n", {"candidate"})] == ["1"]


def test_program_suites_validate_and_round_trip():
    suite = TestSuite("program", (ProgramTest("assert candidate(1) == 2"), ProgramTest("for i in range(3):\n    assert f(i) == i + 1")),
                      entry_point="f", prefix="def f(x):\n", tester_setup="import math", test_setup="K = 1")
    assert TestSuite.from_dict(suite.to_dict()) == suite
    assert suite.tests[1].label("f") == "for i in range(3):"
    with pytest.raises(ValueError, match="statements"):
        ProgramTest("assert (")
    with pytest.raises(ValueError, match="tester_setup"):
        TestSuite("program", (ProgramTest("assert f(1)"),), entry_point="f", tester_setup="def (")
    with pytest.raises(ValueError, match="holds FunctionTests"):
        TestSuite("program", (FunctionTest("1", 2),), entry_point="f")
    with pytest.raises(ValueError, match="kind"):
        TestSuite.from_dict({"kind": "shell", "tests": []})


def test_test_programs_are_cut_into_one_test_per_assert():
    humaneval = ("METADATA = {'author': 'x'}\n\n\ndef check(candidate):\n    import random\n    assert candidate(0, 1) == 1\n"
                 "    assert True, 'no-op'\n    for i in range(100):\n        x, y = random.randint(0, 9), random.randint(0, 9)\n"
                 "        assert candidate(x, y) == x + y\n    lst = list(range(5))\n    total = sum(lst)\n"
                 "    assert candidate(total, 0) == 10\n    print('done')\n\ncheck(add)\n")
    setup, tests = split_test_program(humaneval)
    assert setup == "METADATA = {'author': 'x'}"  # the call of check is dropped: the tester runs the body
    assert [t.code for t in tests] == [
        "import random\nassert candidate(0, 1) == 1",
        "assert True, 'no-op'\nfor i in range(100):\n    x, y = (random.randint(0, 9), random.randint(0, 9))\n    assert candidate(x, y) == x + y",
        "lst = list(range(5))\ntotal = sum(lst)\nassert candidate(total, 0) == 10\nprint('done')",
    ]
    mbpp_setup, mbpp = split_test_program("assert f(1) == sys.getsizeof(1)\nassert int(f(2)) == 3")
    assert mbpp_setup == "" and len(mbpp) == 2


@pytest.mark.parametrize("src, reason", [
    ("def check(candidate):\n    x = candidate(1)\n", "no assert"),
    ("def check(fn):\n    assert fn(1) == 2\n", "one parameter named 'candidate'"),
    ("def check(candidate):\n    if candidate(1) is None:\n        return\n    assert candidate(1) == 2\n", "module level"),
    ("def check(candidate):\n    assert candidate(1) == (\n", "does not parse"),
])
def test_test_programs_that_cannot_run_in_the_tester_are_refused(src, reason):
    with pytest.raises(UnconvertibleTests, match=reason):
        split_test_program(src)


def test_test_cases_parse_safely_while_other_threads_parse():
    """Building test cases in one thread while another parses programs (a training run's trainer and its verifier
    threads) must not trip CPython 3.11/3.12's interpreter-wide AST depth counter; a garbage collection that switches
    threads mid-parse (here on every collection, through a callback) made ``ast.parse`` fail with SystemError."""
    import gc
    import threading
    import time

    from envs.code import parsing
    from envs.code.programs import split_test_program

    errors: list[BaseException] = []

    def switch(phase, info):
        time.sleep(0)  # another thread runs now, as a finalizer's Python code lets it

    def build_cases():
        try:
            for i in range(150):
                FunctionTest("(" * 20 + f"{i}" + ",)" * 20, i)
                parsing.literal_eval("[" * 20 + "1" + "]" * 20)
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    def parse_programs():
        try:
            for i in range(150):
                split_test_program(f"def check(candidate):\n    assert candidate({'(' * 20}{i}{')' * 20}) == {i}\n")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threshold = gc.get_threshold()
    gc.callbacks.append(switch)
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=build_cases), threading.Thread(target=parse_programs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(switch)
        gc.set_threshold(*threshold)
    assert not errors, errors[:3]
