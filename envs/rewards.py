"""The built-in checkers as calls a reward function makes (`envs.from_function`): each returns an
`envs.Verdict`, which the function may return as it is or turn into a number.

    from envs.rewards import math_answer, code_tests

    def reward(problem, completion):
        return math_answer(completion, problem.reference)       # \\boxed{} / Answer: vs the gold

    def reward(problem, completion):
        return code_tests(completion, problem.reference["asserts"], entry_point="solve")

Imports nothing heavy until called (sympy and the sandbox load on first use).
"""

from __future__ import annotations

from typing import Any

from envs.types import Verdict


def math_answer(completion: str, gold: Any, **options: Any) -> Verdict:
    """The math checker (`envs.math.check`, what ``math-v1`` uses): the completion's final answer
    (last ``\\boxed{}`` or ``Answer:`` line) against ``gold``, exactly or symbolically, bounded
    in time. ``options``: `envs.math.check`'s (``extraction="lenient"``, ``rel_tol``, ...)."""
    from envs.math import check

    return check(completion, gold, **options)


def code_tests(completion: str, tests: Any, *, entry_point: str = "", reward: str = "binary", **options: Any) -> Verdict:
    """The code checker (what ``code-v1`` uses): the completion's last fenced code block (else its
    whole text) run against ``tests`` in a sandbox, graded outside it.

    ``tests``: an `envs.code.TestSuite` or its dict form, or Python source of ``assert`` lines
    calling ``entry_point`` (``"assert add(2, 3) == 5"``), or a list of ``{"stdin", "stdout"}``
    pairs for a whole program. ``reward``: ``"binary"`` or ``"fraction"`` of the tests passed.
    ``options``: `envs.code.grade`'s (``backend``, ``limits``).
    """
    from envs.code import StdioTest, TestSuite, grade, parse_asserts
    from envs.code.extract import extract_code

    if isinstance(tests, str):
        if not entry_point:
            raise ValueError("code_tests: assert lines need entry_point, the function they call")
        suite: TestSuite | dict = TestSuite("function", tuple(parse_asserts(tests, entry_point)), entry_point=entry_point)
    elif isinstance(tests, (list, tuple)):
        suite = TestSuite("stdio", tuple(t if isinstance(t, StdioTest) else StdioTest.from_dict(t) for t in tests))
    else:
        suite = tests
    found = extract_code(completion)
    if found is None:
        return Verdict.no_answer(reason="no code in the completion")
    return grade(found.code, suite, reward=reward, span=(found.start, found.end), **options)  # type: ignore[arg-type]


__all__ = ["code_tests", "math_answer"]
