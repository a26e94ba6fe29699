"""The symbolic path: answer trees → sympy objects → algebraic equivalence. Runs only inside the
supervised worker processes of `envs.math.worker`, never in the caller's process, so a slow
simplification can be killed without harming the caller.

Trees arrive as JSON (`encode`/`decode`), are guarded (`guard`: size, depth, and the magnitude
of every numeric power *before* sympy sees it, since sympy evaluates ``Integer**Integer``
eagerly), and are built with sympy's constructors. No string from a model is ever handed to
``sympify``/``parse_expr``/``eval``.

Equality policy here (the caller already tried exact arithmetic):
1. ``a - b`` is zero after sympy's automatic canonicalisation, ``expand``, or ``simplify``;
2. for constants sympy cannot simplify: agreement to 50 significant digits (``evalf(60)``) —
   far beyond any rounding, so ``1/2^99`` vs ``1/2^98`` or ``0.001`` vs ``0.0010001`` never pass;
3. otherwise not equal.

Run as ``python -m envs.math.symbolic``: reads one JSON request a line on stdin, answers one JSON
line on stdout (see `serve`).
"""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction
from typing import Any

from envs.math import nodes as N

MAX_NODES = 400
MAX_DEPTH = 40
MAX_POWER_BITS = 20_000
MAX_SYMBOLIC_EXPONENT = 200


class Refused(Exception):
    """The tree is too large or too deep for the symbolic path."""


# -- JSON encoding of trees (parent ↔ worker) -------------------------------------------------

def encode(node: N.Node) -> Any:
    if isinstance(node, N.Num):
        return ["num", str(node.value.numerator), str(node.value.denominator)]
    if isinstance(node, N.Sym):
        return ["sym", node.name]
    if isinstance(node, N.Const):
        return ["const", node.name]
    if isinstance(node, N.Add):
        return ["add", [encode(a) for a in node.args]]
    if isinstance(node, N.Mul):
        return ["mul", [encode(a) for a in node.args]]
    if isinstance(node, N.Pow):
        return ["pow", encode(node.base), encode(node.exp)]
    if isinstance(node, N.Func):
        return ["func", node.name, [encode(a) for a in node.args]]
    if isinstance(node, N.Percent):
        return ["pct", encode(node.x)]
    if isinstance(node, N.Degrees):
        return ["deg", encode(node.x)]
    if isinstance(node, N.Matrix):
        return ["matrix", [[encode(x) for x in row] for row in node.rows]]
    raise Refused(f"{type(node).__name__} is not sent to the symbolic path")


def decode(data: Any) -> N.Node:
    tag = data[0]
    if tag == "num":
        return N.Num(Fraction(int(data[1]), int(data[2])))
    if tag == "sym":
        return N.Sym(str(data[1]))
    if tag == "const":
        return N.Const(str(data[1]))
    if tag == "add":
        return N.Add(tuple(decode(a) for a in data[1]))
    if tag == "mul":
        return N.Mul(tuple(decode(a) for a in data[1]))
    if tag == "pow":
        return N.Pow(decode(data[1]), decode(data[2]))
    if tag == "func":
        return N.Func(str(data[1]), tuple(decode(a) for a in data[2]))
    if tag == "pct":
        return N.Percent(decode(data[1]))
    if tag == "deg":
        return N.Degrees(decode(data[1]))
    if tag == "matrix":
        return N.Matrix(tuple(tuple(decode(x) for x in row) for row in data[1]))
    raise ValueError(f"unknown tree tag {tag!r}")


# -- guards -----------------------------------------------------------------------------------

def guard(node: N.Node) -> None:
    """Refuse trees that could make sympy run away; cheap, pure Python, no sympy import."""
    if N.size(node) > MAX_NODES:
        raise Refused(f"more than {MAX_NODES} nodes")
    _guard(node, 0)


def _guard(node: N.Node, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise Refused(f"nested deeper than {MAX_DEPTH}")
    if isinstance(node, N.Pow):
        if not N.free_symbols(node.exp):
            e = _log2_magnitude(node.exp)
            if N.free_symbols(node.base):
                if e > math.log2(MAX_SYMBOLIC_EXPONENT):
                    raise Refused("symbolic power with a huge exponent")
            else:
                b = _log2_magnitude(node.base)
                if b > 0 and e > 0 and e + math.log2(b) > math.log2(MAX_POWER_BITS):
                    raise Refused("numeric power too large")
        elif not N.free_symbols(node.base) and _log2_magnitude(node.base) > 64:
            raise Refused("huge base to a symbolic power")
    if isinstance(node, N.Func) and node.name in ("factorial", "binom") and not any(N.free_symbols(a) for a in node.args):
        if max(_log2_magnitude(a) for a in node.args) > 11:
            raise Refused(f"{node.name} argument too large")
    for child in N.children(node):
        _guard(child, depth + 1)


def _log2_magnitude(node: N.Node) -> float:
    """An upper estimate of log2|value| of a constant tree (inf when astronomically large)."""
    if isinstance(node, N.Num):
        v = node.value
        return max(abs(v.numerator).bit_length(), v.denominator.bit_length())
    if isinstance(node, N.Const):
        return 2.0
    if isinstance(node, N.Add):
        return max((_log2_magnitude(a) for a in node.args), default=0) + math.log2(len(node.args))
    if isinstance(node, N.Mul):
        return sum(_log2_magnitude(a) for a in node.args)
    if isinstance(node, N.Pow):
        b, e = _log2_magnitude(node.base), _log2_magnitude(node.exp)
        if e > 60:
            return math.inf
        return b * (2.0**e)
    if isinstance(node, N.Func):
        inner = max((_log2_magnitude(a) for a in node.args), default=0)
        if node.name == "factorial":
            return math.inf if inner > 20 else (2.0**inner) * inner
        if node.name in ("exp", "sinh", "cosh"):
            return math.inf if inner > 10 else 2.0**inner * 1.5
        return inner + 1
    if isinstance(node, (N.Percent, N.Degrees)):
        return _log2_magnitude(node.x) + 1
    return 64.0


# -- sympy conversion (worker side only) ------------------------------------------------------

def to_sympy(node: N.Node):
    import sympy

    return _to_sympy(node, sympy)


def _to_sympy(node: N.Node, sp):
    if isinstance(node, N.Num):
        return sp.Rational(node.value.numerator, node.value.denominator)
    if isinstance(node, N.Sym):
        return sp.Symbol(node.name)
    if isinstance(node, N.Const):
        return {"pi": sp.pi, "e": sp.E, "i": sp.I, "oo": sp.oo}[node.name]
    if isinstance(node, N.Add):
        return sp.Add(*[_to_sympy(a, sp) for a in node.args])
    if isinstance(node, N.Mul):
        return sp.Mul(*[_to_sympy(a, sp) for a in node.args])
    if isinstance(node, N.Pow):
        base, exp = _to_sympy(node.base, sp), _to_sympy(node.exp, sp)
        if base.is_number and base.is_negative and exp.is_Rational and not exp.is_Integer and exp.q % 2 == 1:
            return sp.real_root(base, exp.q) ** exp.p  # odd roots of negatives are real (policy)
        return sp.Pow(base, exp)
    if isinstance(node, N.Func):
        args = [_to_sympy(a, sp) for a in node.args]
        return _sympy_func(node.name, args, sp)
    if isinstance(node, N.Percent):
        return _to_sympy(node.x, sp) / 100
    if isinstance(node, N.Degrees):
        return _to_sympy(node.x, sp) * sp.pi / 180
    if isinstance(node, N.Matrix):
        return sp.Matrix([[_to_sympy(x, sp) for x in row] for row in node.rows])
    raise Refused(f"{type(node).__name__} has no sympy form")


def _sympy_func(name: str, args: list, sp):
    table = {
        "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "cot": sp.cot, "sec": sp.sec, "csc": sp.csc,
        "asin": sp.asin, "acos": sp.acos, "atan": sp.atan, "sinh": sp.sinh, "cosh": sp.cosh,
        "tanh": sp.tanh, "exp": sp.exp, "sqrt": sp.sqrt, "abs": sp.Abs, "factorial": sp.factorial,
        "binom": sp.binomial, "floor": sp.floor, "ceil": sp.ceiling, "gcd": sp.gcd, "lcm": sp.lcm,
        "log10": lambda x: sp.log(x, 10), "max": sp.Max, "min": sp.Min,
    }
    if name == "log":
        return sp.log(args[0]) if len(args) == 1 else sp.log(args[0], args[1])
    if name == "det":
        return args[0].det()
    if name not in table:
        raise Refused(f"function {name} has no sympy form")
    return table[name](*args)


def _is_zero(d, reference, sp) -> tuple[bool | None, str]:
    """Whether the sympy expression ``d`` is zero: (True/False/None, method)."""
    if d == 0:
        return True, "sympy-canonical"
    if sp.count_ops(d) > 300:
        return None, "too large to simplify"
    e = sp.expand(d)
    if e == 0:
        return True, "sympy-expand"
    s = sp.simplify(e)
    if s == 0:
        return True, "sympy-simplify"
    if d.is_number:
        try:
            v = complex(sp.N(d, 60))
            ref = max(1.0, abs(complex(sp.N(reference, 30))))
        except (TypeError, ValueError):
            return None, "no numeric value"
        if abs(v) <= 1e-50 * ref:
            return True, "numeric-50-digits"
        return False, "sympy-numeric"
    return False, "sympy-simplify"


def equal(a: N.Node, b: N.Node) -> tuple[bool | None, str]:
    """Whether two scalar trees are equal (see module docstring); runs sympy."""
    import sympy as sp

    guard(a)
    guard(b)
    ea, eb = to_sympy(a), to_sympy(b)
    if isinstance(ea, sp.MatrixBase) or isinstance(eb, sp.MatrixBase):
        return False, "matrix vs scalar"
    return _is_zero(ea - eb, eb, sp)


def proportional(a: N.Node, b: N.Node, positive: bool) -> tuple[bool | None, str]:
    """Whether ``a = c·b`` for a constant ``c ≠ 0`` (``c > 0`` when ``positive``): equations
    ``l1 = r1`` and ``l2 = r2`` are the same when ``l1 - r1`` and ``l2 - r2`` are proportional."""
    import sympy as sp

    guard(a)
    guard(b)
    ea, eb = to_sympy(a), to_sympy(b)
    if eb == 0 or ea == 0:
        return (ea == eb), "zero side"
    ratio = sp.simplify(ea / eb)
    if ratio.free_symbols or ratio == 0 or not ratio.is_number:
        return False, "ratio not constant"
    if positive and not bool(ratio.is_positive):
        return False, "ratio not positive"
    return True, "sympy-ratio"


# -- worker loop ------------------------------------------------------------------------------

def handle(request: dict) -> dict:
    op = request.get("op")
    try:
        a, b = decode(request["a"]), decode(request["b"])
        if op == "equal":
            result, method = equal(a, b)
        elif op == "proportional":
            result, method = proportional(a, b, bool(request.get("positive")))
        else:
            return {"result": None, "method": f"unknown op {op!r}"}
    except Refused as e:
        return {"result": None, "method": f"refused: {e}"}
    except MemoryError:
        raise
    except Exception as e:  # a sympy failure is "undecided", not a crash of the worker
        return {"result": None, "method": f"sympy error: {type(e).__name__}: {e}"[:300]}
    return {"result": result, "method": method}


def serve(memory_mb: int) -> None:
    """Answer requests until stdin closes. The memory limit makes a runaway computation fail
    with MemoryError (the worker then exits and is replaced) instead of exhausting the machine."""
    if memory_mb > 0:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import sympy  # noqa: F401  (import before announcing readiness: the first request is timed)

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            response = handle(request)
        except MemoryError:
            out.write(json.dumps({"result": None, "method": "memory limit exceeded"}) + "\n")
            out.flush()
            return
        response["id"] = request.get("id")
        out.write(json.dumps(response) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 2048)
