"""The code environment: Python solutions judged by hidden tests run in a sandbox.

Public API for adapters::

    from envs.code import grade, TestSuite, FunctionTest, StdioTest
    verdict = grade(solution, TestSuite("function", (FunctionTest("2, 3", 5),), entry_point="add"))

    # dataset tests that are programs (loops, randomness): run by an isolated tester
    setup, tests = split_test_program("def check(candidate):\n    for i in range(9):\n        assert candidate(i, 1) == i + 1\n")
    verdict = grade(solution, TestSuite("program", tests, entry_point="add", tester_setup=setup))

Grading happens outside the untrusted process: see `envs.code.grade`, `envs.code.values` and, for
``program`` suites, `envs.code.tester`.
"""

from envs.code.grade import DEFAULT_LIMITS, grade, grade_many, program_for
from envs.code.graders import GRADERS, TestResult
from envs.code.programs import split_test_program
from envs.code.testcases import FunctionTest, ProgramTest, StdioTest, TestSuite, UnconvertibleTests, parse_asserts

__all__ = ["DEFAULT_LIMITS", "FunctionTest", "GRADERS", "ProgramTest", "StdioTest", "TestResult", "TestSuite", "UnconvertibleTests",
           "grade", "grade_many", "parse_asserts", "program_for", "split_test_program"]
