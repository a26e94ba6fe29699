import pytest

from envs.code import FunctionTest, StdioTest, TestSuite, UnconvertibleTests, parse_asserts
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
