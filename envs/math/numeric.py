"""Floating-point evaluation of answer trees, used to *refute* equality cheaply and for the
opt-in numeric tolerance.

Two answers whose values differ clearly at some point are not equal, and no algebra is needed to
say so. Agreement in floating point never proves equality on its own (``1/2^99`` and ``1/2^98``
would agree under a loose tolerance); equality is proved exactly (`envs.math.exact`) or
symbolically (`envs.math.symbolic`). Principal branches throughout (``cmath``).
"""

from __future__ import annotations

import cmath
import math
import random

from envs.math import nodes as N

REFUTE_REL = 1e-7
"""Relative difference above which two float evaluations are certainly different values."""

MAX_MAGNITUDE = 1e250


class NoValue(Exception):
    """The tree has no finite numeric value here (overflow, pole, unsupported node)."""


_FUNCS = {
    "sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "asin": cmath.asin, "acos": cmath.acos,
    "atan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh, "tanh": cmath.tanh, "exp": cmath.exp,
    "sqrt": cmath.sqrt, "abs": lambda z: complex(abs(z)), "log10": cmath.log10,
    "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z), "cot": lambda z: 1 / cmath.tan(z),
}


def approx(node: N.Node, env: dict[str, complex] | None = None) -> complex:
    """The value of a scalar tree at the point ``env`` (variables by name); raises `NoValue`."""
    try:
        z = _ev(node, env or {})
    except (OverflowError, ZeroDivisionError, ValueError, RecursionError) as e:
        raise NoValue(str(e)) from None
    if not (cmath.isfinite(z) and abs(z) < MAX_MAGNITUDE):
        raise NoValue("not finite")
    return z


def _ev(node: N.Node, env: dict[str, complex]) -> complex:
    if isinstance(node, N.Num):
        return complex(float(node.value)) if abs(node.value) < 1e300 else _raise("overflow")
    if isinstance(node, N.Add):
        return sum((_ev(a, env) for a in node.args), 0j)
    if isinstance(node, N.Mul):
        out = 1 + 0j
        for a in node.args:
            out *= _ev(a, env)
        return out
    if isinstance(node, N.Sym):
        if node.name not in env:
            raise NoValue(f"no value for {node.name}")
        return env[node.name]
    if isinstance(node, N.Const):
        return {"pi": math.pi + 0j, "e": math.e + 0j, "i": 1j}.get(node.name) or _raise("infinity")
    if isinstance(node, N.Pow):
        base, exp = _ev(node.base, env), _ev(node.exp, env)
        if abs(exp) > 1e4 and abs(base) != 1:
            raise NoValue("huge exponent")
        if exp.imag == 0 and exp.real == int(exp.real):
            return base ** int(exp.real)
        if base.imag == 0 and base.real < 0 and exp.imag == 0:
            den = _odd_denominator(exp.real)
            if den:  # real odd root, matching the exact path's convention
                return -((-base.real) ** exp.real) if round(exp.real * den) % 2 else (-base.real) ** exp.real
        return base**exp
    if isinstance(node, N.Func):
        args = [_ev(a, env) for a in node.args]
        if node.name == "log":
            return cmath.log(args[0]) / (cmath.log(args[1]) if len(args) > 1 else 1)
        if node.name == "factorial":
            x = args[0].real
            if args[0].imag or x > 170 or x < 0 or x != int(x):
                raise NoValue("factorial")
            return complex(math.factorial(int(x)))
        if node.name == "binom":
            n, k = args[0].real, args[1].real
            return complex(math.comb(int(n), int(k))) if n == int(n) and k == int(k) and 0 <= n < 2000 else _raise("binom")
        if node.name in ("floor", "ceil"):
            return complex((math.floor if node.name == "floor" else math.ceil)(args[0].real))
        if node.name in _FUNCS:
            return _FUNCS[node.name](*args)
        raise NoValue(f"function {node.name}")
    if isinstance(node, N.Percent):
        return _ev(node.x, env) / 100
    if isinstance(node, N.Degrees):
        return _ev(node.x, env) * math.pi / 180
    raise NoValue(f"{type(node).__name__} has no numeric value")


def _odd_denominator(x: float) -> int:
    for den in (3, 5, 7, 9):
        if abs(x * den - round(x * den)) < 1e-12:
            return den
    return 0


def _raise(msg: str) -> complex:
    raise NoValue(msg)


def close(a: complex, b: complex, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def sample_points(names: list[str], count: int = 3) -> list[dict[str, complex]]:
    """Deterministic positive sample points for the variables ``names``."""
    rng = random.Random("numeric|" + "|".join(names))
    return [{n: complex(rng.uniform(0.3, 3.0)) for n in names} for _ in range(count)]


def refute(a: N.Node, b: N.Node) -> bool:
    """True when ``a`` and ``b`` certainly differ: their values disagree clearly at some point."""
    names = sorted(N.free_symbols(a) | N.free_symbols(b))
    for env in sample_points(names) if names else [{}]:
        try:
            va, vb = approx(a, env), approx(b, env)
        except NoValue:
            continue
        if not close(va, vb, REFUTE_REL) and abs(va - vb) > 1e-12:
            return True
    return False


def within_tolerance(a: N.Node, b: N.Node, rel_tol: float) -> bool:
    """The opt-in numeric policy: constant answers whose values differ by at most ``rel_tol``
    relative to the gold (``b``)."""
    if N.free_symbols(a) or N.free_symbols(b):
        return False
    try:
        va, vb = approx(a), approx(b)
    except NoValue:
        return False
    return abs(va - vb) <= rel_tol * max(abs(vb), 1e-300)
