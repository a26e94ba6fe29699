"""Test suites for code problems, and conversion of assert-style tests into input/output pairs.

A `TestSuite` is what a code problem's ``reference`` holds (as a dict, see `TestSuite.to_dict`):

- ``function`` tests call ``entry_point(*args)`` in the sandbox; only the arguments (Python
  literals, or for datasets whose tests build objects of the solution's own classes, expressions
  evaluated in the candidate's module) enter it. The expected return values stay on the trusted
  side, which compares.
- ``stdio`` tests run the whole program with a given stdin; the expected stdout stays outside.
- ``program`` tests are the dataset's own test code (loops, randomness, computed expected
  values), run by a tester process that calls the candidate, which runs in a process of its own,
  through a data-only channel (`envs.code.tester`). Used only where the tests do not convert to
  pairs: the expected values then live in the tester, out of the candidate's reach.

`parse_asserts` turns dataset tests such as ``assert f([1, 2], 3) == (4, 5)`` or
``assert abs(candidate(2.5) - 0.5) < 1e-6`` into `FunctionTest`s. An assert it cannot split into
arguments and a literal expected value makes the whole problem unconvertible
(`UnconvertibleTests`), because running the dataset's own assert next to the candidate would put
its expected value within the candidate's reach; `envs.code.programs.split_test_program` makes
such tests a ``program`` suite instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from envs.code import parsing, values

TRANSFORMS = ("set", "sorted", "tuple", "list", "bool")
"""Trusted-side conversions applied to a returned value before comparison (``set(f(x)) == {...}``)."""


class UnconvertibleTests(ValueError):
    """A dataset's tests cannot be split into literal inputs and expected outputs."""


@dataclass(frozen=True)
class FunctionTest:
    """``entry_point(*args)`` must return ``expected``.

    Attributes:
        args: Python source of the positional arguments, e.g. ``"[1, 2], 3"``: literals, unless
            ``evaluated``.
        expected: The expected return value (plain built-in types).
        transform: One of `TRANSFORMS` applied to the returned value first, or None.
        abs_tol: Absolute float tolerance for this test (default `values.ABS_TOL`).
        rel_tol: Relative float tolerance for this test (default `values.REL_TOL`).
        evaluated: ``args`` is an expression evaluated in the candidate's module (after
            `TestSuite.test_setup`), for arguments that are objects of the solution's own classes
            or types such as ``int``. Harmless to grading: the candidate only chooses its own
            inputs, and the expected value stays outside.
    """

    args: str
    expected: Any
    transform: str | None = None
    abs_tol: float | None = None
    rel_tol: float | None = None
    evaluated: bool = False

    def __post_init__(self) -> None:
        source = "(" + self.args + ",)"
        try:  # the sandbox reads literal arguments with ast.literal_eval: refuse anything else now
            if self.evaluated:
                parsing.parse(source, mode="eval")
            elif self.args.strip():
                parsing.literal_eval(source)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
            what = "an expression list" if self.evaluated else "Python literals separated by commas"
            raise ValueError(f"FunctionTest.args must be {what}, got {self.args[:80]!r}: {e}") from e
        if self.transform not in (None, *TRANSFORMS):
            raise ValueError(f"FunctionTest.transform must be one of {TRANSFORMS}, got {self.transform!r}")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"args": self.args, "expected": values.encode(self.expected)}
        for k in ("transform", "abs_tol", "rel_tol"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.evaluated:
            d["evaluated"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FunctionTest:
        if d.get("transform") not in (None, *TRANSFORMS):
            raise ValueError(f"test transform must be one of {TRANSFORMS}, got {d.get('transform')!r}")
        return cls(str(d["args"]), values.decode(d["expected"]), d.get("transform"), d.get("abs_tol"), d.get("rel_tol"),
                   d.get("evaluated") is True)

    def label(self, entry_point: str) -> str:
        text = f"{entry_point}({self.args})"
        return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class StdioTest:
    """The program, given ``stdin``, must print ``stdout`` (compared line by line with trailing
    whitespace and trailing blank lines ignored)."""

    stdin: str
    stdout: str

    def to_dict(self) -> dict[str, Any]:
        return {"stdin": self.stdin, "stdout": self.stdout}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StdioTest:
        return cls(str(d["stdin"]), str(d["stdout"]))


@dataclass(frozen=True)
class ProgramTest:
    """One test of a ``program`` suite: a block of the dataset's test code (statements ending in an
    assert, or a loop of asserts), run in the tester where ``candidate`` and the entry point's name
    call the candidate. It passes when the block runs to its end.

    Attributes:
        code: Python statements (module level; blocks of one suite share a namespace, in order).
    """

    code: str

    def __post_init__(self) -> None:
        _compiles(self.code, "ProgramTest.code")

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProgramTest:
        return cls(str(d["code"]))

    def label(self, entry_point: str) -> str:
        """The first line of the block's last statement (its assert or loop)."""
        last = parsing.parse(self.code).body[-1]
        text = ast.unparse(last).splitlines()[0]
        return text if len(text) <= 80 else text[:77] + "..."


def _compiles(code: str, what: str) -> None:
    try:
        compile(code, "<test>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise ValueError(f"{what} must be Python statements: {e}") from e


TEST_TYPES: dict[str, Any] = {"function": FunctionTest, "stdio": StdioTest, "program": ProgramTest}
"""The test class of each suite kind."""


@dataclass(frozen=True)
class TestSuite:
    """All tests of one problem.

    Attributes:
        kind: ``"function"``, ``"stdio"`` or ``"program"`` (see the module docstring).
        tests: The tests, in order.
        entry_point: The function to call (``function`` and ``program`` suites).
        prefix: Code placed before a completion that continues it (HumanEval's prompt); a
            completion that defines ``entry_point`` itself gets only the prefix's imports.
        setup: Code run before the solution, in its module.
        test_setup: Code run after the solution, in its module (MBPP's ``test_setup_code``,
            which builds objects of the solution's classes); evaluated arguments may use its names.
        tester_setup: ``program`` suites: trusted code the tester runs before the tests (the
            helpers the dataset's tests call, e.g. HumanEval's ``poly``; imports they assume).
    """

    __test__ = False  # not a pytest class

    kind: Literal["function", "stdio", "program"]
    tests: tuple[FunctionTest, ...] | tuple[StdioTest, ...] | tuple[ProgramTest, ...]
    entry_point: str = ""
    prefix: str = ""
    setup: str = ""
    test_setup: str = ""
    tester_setup: str = ""

    def __post_init__(self) -> None:
        if self.kind not in TEST_TYPES:
            raise ValueError(f"TestSuite.kind must be one of {sorted(TEST_TYPES)}, got {self.kind!r}")
        if self.kind != "stdio" and not self.entry_point.isidentifier():
            raise ValueError(f"TestSuite.entry_point must be a function name, got {self.entry_point!r}")
        if not self.tests:
            raise ValueError("TestSuite.tests is empty: a problem needs at least one test")
        wrong = [type(t).__name__ for t in self.tests if not isinstance(t, TEST_TYPES[self.kind])]
        if wrong:
            raise ValueError(f"TestSuite of kind {self.kind!r} holds {wrong[0]}s: expected {TEST_TYPES[self.kind].__name__}s")
        if self.tester_setup:
            _compiles(self.tester_setup, "TestSuite.tester_setup")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "tests": [t.to_dict() for t in self.tests]}
        for k in ("entry_point", "prefix", "setup", "test_setup", "tester_setup"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any] | TestSuite) -> TestSuite:
        if isinstance(d, TestSuite):
            return d
        if not isinstance(d, dict) or "kind" not in d or "tests" not in d:
            raise ValueError("a code problem's reference must be a dict with 'kind' and 'tests' (see envs.code.testcases.TestSuite)")
        if d["kind"] not in TEST_TYPES:
            raise ValueError(f"unknown test suite kind {d['kind']!r}; known: {sorted(TEST_TYPES)}")
        test_cls = TEST_TYPES[d["kind"]]
        return cls(d["kind"], tuple(test_cls.from_dict(t) for t in d["tests"]),
                   **{k: str(d.get(k, "")) for k in ("entry_point", "prefix", "setup", "test_setup", "tester_setup")})


# -- converting assert-style tests ----------------------------------------------------------

_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _literal(node: ast.AST, what: str) -> Any:
    """A literal, or constant arithmetic over literals (``2.0 / 3.0``, ``3 * 19``, ``'ab' + 'c'``,
    small powers), evaluated here on the trusted side; anything else is unconvertible."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            return _ARITH[type(node.op)](_literal(node.left, what), _literal(node.right, what))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, exp = _literal(node.left, what), _literal(node.right, what)
            if type(exp) is int and 0 <= exp <= 64 and type(base) in (int, float) and abs(base) < 1 << 64:
                return base ** exp
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [_literal(e, what) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = _literal(node.operand, what)
            return -v if isinstance(node.op, ast.USub) else +v
    except (TypeError, ZeroDivisionError, OverflowError) as e:
        raise UnconvertibleTests(f"{what} cannot be computed: {ast.unparse(node)[:80]}: {e}") from e
    raise UnconvertibleTests(f"{what} is not a literal: {ast.unparse(node)[:80]}")


def _source_of(node: ast.AST) -> str:
    """Literal source for an argument (constant arithmetic is computed and written back as a literal)."""
    try:
        ast.literal_eval(node)
        return ast.unparse(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = _literal(node, "argument")
        text = repr(value)
        try:
            if parsing.literal_eval(text) != value and value == value:
                raise ValueError
        except (ValueError, SyntaxError) as e:
            raise UnconvertibleTests(f"argument has no literal form: {ast.unparse(node)[:80]}") from e
        return text


class _Call(NamedTuple):
    """A call of the function under test: its argument source, and whether that source must be
    evaluated in the candidate's module (`FunctionTest.evaluated`)."""

    args: str
    evaluated: bool

    def test(self, expected: Any, **options: Any) -> FunctionTest:
        return FunctionTest(self.args, expected, evaluated=self.evaluated, **options)


def _call_args(node: ast.AST, names: set[str], evaluate: bool) -> _Call | None:
    """The arguments of ``name(...)`` if ``node`` is such a call: literals where they all are,
    else (when ``evaluate``) their source, to be evaluated next to the candidate."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
        if node.keywords:
            raise UnconvertibleTests(f"keyword arguments are not supported: {ast.unparse(node)[:80]}")
        try:
            return _Call(", ".join(_source_of(a) for a in node.args), False)
        except UnconvertibleTests:
            if not evaluate:
                raise
            return _Call(", ".join(ast.unparse(a) for a in node.args), True)
    return None


def _one_assert(test: ast.expr, names: set[str], evaluate: bool) -> FunctionTest:
    # f(x) == y   /   y == f(x)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
        left, right = test.left, test.comparators[0]
        for call, exp in ((left, right), (right, left)):
            found = _call_args(call, names, evaluate)
            if found is not None:
                return found.test(_literal(exp, "expected value"))
            # set(f(x)) == set(y) / sorted(f(x)) == sorted(y) / set(f(x)) == {..}
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in TRANSFORMS and len(call.args) == 1:
                inner = _call_args(call.args[0], names, evaluate)
                if inner is not None:
                    fn = call.func.id
                    expected = _literal(exp.args[0], "expected value") if (isinstance(exp, ast.Call) and isinstance(exp.func, ast.Name) and exp.func.id == fn and len(exp.args) == 1) else _literal(exp, "expected value")
                    return inner.test({"set": set, "sorted": sorted, "tuple": tuple, "list": list}[fn](expected), transform=fn)
    # abs(f(x) - y) < tol   (also <=)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE)):
        left = test.left
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "abs" and len(left.args) == 1 \
                and isinstance(left.args[0], ast.BinOp) and isinstance(left.args[0].op, ast.Sub):
            diff = left.args[0]
            tol = float(_literal(test.comparators[0], "tolerance"))
            for call, exp in ((diff.left, diff.right), (diff.right, diff.left)):
                found = _call_args(call, names, evaluate)
                if found is not None:
                    return found.test(_literal(exp, "expected value"), abs_tol=tol, rel_tol=0.0)
    # math.isclose(f(x), y[, rel_tol=..., abs_tol=...])
    if isinstance(test, ast.Call) and ast.unparse(test.func) in ("math.isclose", "isclose") and len(test.args) == 2:
        kw = {k.arg: float(_literal(k.value, k.arg or "tolerance")) for k in test.keywords}
        for call, exp in ((test.args[0], test.args[1]), (test.args[1], test.args[0])):
            found = _call_args(call, names, evaluate)
            if found is not None:
                return found.test(_literal(exp, "expected value"), abs_tol=kw.get("abs_tol", 0.0), rel_tol=kw.get("rel_tol", 1e-9))
    # f(x)   /   not f(x)   (truthiness asserts)
    found = _call_args(test, names, evaluate)
    if found is not None:
        return found.test(True, transform="bool")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        found = _call_args(test.operand, names, evaluate)
        if found is not None:
            return found.test(False, transform="bool")
    raise UnconvertibleTests(f"unsupported assert: {ast.unparse(test)[:100]}")


def parse_asserts(source: str, names: set[str] | str, *, evaluated_args: bool = False) -> list[FunctionTest]:
    """Every ``assert`` in ``source`` as a `FunctionTest` calling one of ``names``.

    Statements other than asserts, docstrings, bare names (HumanEval's stray ``print``) and simple
    assignments of metadata are refused (loops, helper calls, randomness): their meaning cannot
    be captured as fixed pairs.

    Args:
        evaluated_args: Accept arguments that are not literals (``Pair(5, 24)``, ``int``, a name
            bound by the suite's ``test_setup``) as `FunctionTest.evaluated` expressions: right for
            datasets whose tests run in the solution's own module (MBPP).
    """
    names = {names} if isinstance(names, str) else set(names)
    try:
        tree = parsing.parse(source)
    except SyntaxError as e:
        raise UnconvertibleTests(f"test code does not parse: {e}") from e
    tests: list[FunctionTest] = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Assert):
                if isinstance(stmt.test, ast.Constant) and stmt.test.value is True:
                    continue  # `assert True, "..."`: tests nothing
                tests.append(_one_assert(stmt.test, names, evaluated_args))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value.func) == "print":
                continue
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "check":
                visit(stmt.body)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Constant, ast.Name)):
                continue  # a docstring, or a bare name (`print` without a call) that does nothing
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) and t.id.isupper() for t in stmt.targets):
                continue  # METADATA = {...}
            else:
                raise UnconvertibleTests(f"unsupported statement in tests: {ast.unparse(stmt).splitlines()[0][:100]}")

    visit(tree.body)
    if not tests:
        raise UnconvertibleTests("no assert statements found")
    return tests


def normalise_stdout(text: str) -> list[str]:
    """Lines with trailing whitespace removed and trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def apply_transform(value: Any, transform: str | None) -> Any:
    """Apply a `TRANSFORMS` conversion on the trusted side; a value it cannot convert stays an
    opaque non-match."""
    if transform is None or isinstance(value, values.Opaque):
        return value
    try:
        return {"set": set, "sorted": sorted, "tuple": tuple, "list": list, "bool": bool}[transform](value)
    except TypeError:
        return values.Opaque(f"{type(value).__name__} ({transform} failed)")


__all__ = ["FunctionTest", "ProgramTest", "StdioTest", "TEST_TYPES", "TestSuite", "UnconvertibleTests", "apply_transform", "normalise_stdout", "parse_asserts"]
