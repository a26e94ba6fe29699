"""The code environment: Python solutions judged by hidden tests run in a sandbox.

Public API for adapters::

    from envs.code import grade, TestSuite, FunctionTest, StdioTest
    verdict = grade(solution, TestSuite("function", (FunctionTest("2, 3", 5),), entry_point="add"))

Grading happens outside the untrusted process: see `envs.code.grade` and `envs.code.values`.
"""

from envs.code.grade import DEFAULT_LIMITS, TestResult, grade, grade_many, program_for
from envs.code.testcases import FunctionTest, StdioTest, TestSuite, UnconvertibleTests, parse_asserts

__all__ = ["DEFAULT_LIMITS", "FunctionTest", "StdioTest", "TestResult", "TestSuite", "UnconvertibleTests", "grade", "grade_many",
           "parse_asserts", "program_for"]
