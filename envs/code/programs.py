"""A dataset's test code as a ``program`` suite: the tests the tester runs, one block per assert.

HumanEval's tests define ``check(candidate)``; MBPP's are top-level asserts. `split_test_program`
keeps the dataset's own code and only cuts it into tests, so nothing is re-interpreted: each test
is a block of consecutive statements ending in an assert (or in a loop, ``if`` or ``with`` that
holds asserts); statements before it that assert nothing (``import random``, ``lst = ...``) run
as part of it, and so does trailing code. The blocks run in order in one namespace, in which
``candidate`` and the entry point's name call the candidate (`envs.code.tester`).
"""

from __future__ import annotations

import ast

from envs.code import parsing
from envs.code.testcases import ProgramTest, UnconvertibleTests

CANDIDATE_PARAMETER = "candidate"
"""The name under which the tests call the function under test (besides its own name)."""


def _asserts_something(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Assert) and not (isinstance(n.test, ast.Constant) and n.test.value is True)
               for n in ast.walk(stmt))


def _is_check(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.FunctionDef) and stmt.name == "check"


def _is_check_call(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name) \
        and stmt.value.func.id == "check"


def split_test_program(source: str) -> tuple[str, tuple[ProgramTest, ...]]:
    """``(setup, tests)`` from a dataset's test code.

    With a ``def check(candidate)``: ``setup`` is the rest of the top level (``METADATA``,
    imports, helpers; a call of ``check`` itself is dropped) and the tests come from its body.
    Otherwise the tests come from the top level and ``setup`` is empty.

    Raises `UnconvertibleTests` when the code does not parse, asserts nothing, names the
    parameter of ``check`` otherwise than ``candidate``, or uses ``return``/``yield`` in the
    body (which cannot run at module level).
    """
    try:
        tree = parsing.parse(source)
    except SyntaxError as e:
        raise UnconvertibleTests(f"test code does not parse: {e}") from e
    checks = [s for s in tree.body if _is_check(s)]
    if len(checks) > 1:
        raise UnconvertibleTests("test code defines check() more than once")
    if checks:
        check = checks[0]
        params = [a.arg for a in check.args.posonlyargs + check.args.args]
        if params != [CANDIDATE_PARAMETER]:
            raise UnconvertibleTests(f"check() must take one parameter named {CANDIDATE_PARAMETER!r}, got {params}")
        setup = ast.unparse(ast.Module([s for s in tree.body if not _is_check(s) and not _is_check_call(s)], []))
        body = check.body
    else:
        setup, body = "", tree.body
    blocks: list[list[ast.stmt]] = []
    pending: list[ast.stmt] = []
    for stmt in body:
        pending.append(stmt)
        if _asserts_something(stmt):
            blocks.append(pending)
            pending = []
    if not blocks:
        raise UnconvertibleTests("no assert statements found")
    blocks[-1] += pending  # trailing statements run with the last test
    tests = []
    for block in blocks:
        code = ast.unparse(ast.Module(block, []))
        try:
            tests.append(ProgramTest(code))
        except ValueError as e:  # `return` in check's body, for one
            raise UnconvertibleTests(f"a test cannot run at module level: {e}") from e
    return setup, tuple(tests)
