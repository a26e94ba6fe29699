"""Exact equality of products of powers of rationals, however large, without computing them.

``3^{3^{3^3}}`` against ``3^{7625597484987}``, ``10^{10^{8}}`` against ``10^{100000000}``,
``\\sqrt{\\sqrt{\\sqrt{2}}}`` against ``2^{1/8}``, ``\\sqrt{2}\\sqrt{3}`` against ``\\sqrt{6}``:
numbers far too large (or too deeply nested) to evaluate are compared through a canonical form.

A value here is ``sign · Π p^{x_p}`` over primes ``p`` with rational exponents ``x_p``. By unique
factorisation, and because primes are multiplicatively independent over the rationals (raise
both sides to a common denominator), two such values are equal exactly when their signs and
exponent maps are equal, so equality is structural and never a numerical judgement. An exponent
is a `Fraction` while its numerator and denominator fit `LIMIT_BITS`; a larger (rational)
exponent is itself held in this form (`Powers`), so towers nest one level per storey and the
same structural equality applies to them.

Scope (anything else raises `NotExact` and the caller tries other evidence): integer and rational
literals whose numerator and denominator can be factored (below 2^64, or a perfect power of such a
number), products, quotients, powers with rational exponents, square roots and absolute values.
Sums are outside it (``10^{100}+1`` has no such form). Conventions match `envs.math.exact`:
principal roots of positive numbers, real odd roots of negative ones; an even root of a negative
number is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Union

from envs.math import exact
from envs.math import nodes as N
from envs.math.exact import NotExact

LIMIT_BITS = 20_000
"""Exponents whose numerator and denominator fit in this many bits are held as exact `Fraction`s."""

MAX_FACTORS = 64
"""Most distinct primes a value may carry (bounds work per operation)."""

MAX_ROOT_DEGREE = 256
"""Literals above 2^64 are factored only as perfect powers m^k with k up to this degree."""


@dataclass(frozen=True)
class Powers:
    """``sign · Π p^{x}`` for ``(p, x)`` in ``exps`` (primes ascending, no zero exponent)."""

    sign: int
    exps: tuple[tuple[int, "Exp"], ...]


Exp = Union[Fraction, Powers]
ZERO = "zero"  # the value 0: has no factorisation, only 0·x = 0 and 0^(positive) = 0 are defined


def equal(a: N.Node, b: N.Node) -> bool | None:
    """Whether two constant trees are equal, decided on their canonical forms; None when either
    tree is outside this form (see module docstring)."""
    try:
        return value(a) == value(b)
    except (NotExact, RecursionError, ZeroDivisionError):
        return None


def value(node: N.Node) -> Powers | str:
    """The canonical form of a constant tree, or `ZERO`; raises `NotExact` outside the scope."""
    if isinstance(node, N.Num):
        return _from_rational(node.value) if node.value else ZERO
    if isinstance(node, N.Mul):
        out: Powers | str = Powers(1, ())
        for a in node.args:
            out = _mul(out, value(a))
        return out
    if isinstance(node, N.Pow):
        return _power(value(node.base), exponent(node.exp))
    if isinstance(node, N.Func) and len(node.args) == 1:
        if node.name == "sqrt":
            return _power(value(node.args[0]), Fraction(1, 2))
        if node.name == "abs":
            v = value(node.args[0])
            return v if v == ZERO else Powers(1, v.exps)  # type: ignore[union-attr]
    raise NotExact(f"{type(node).__name__} has no power-product form")


def exponent(node: N.Node) -> Exp:
    """The value of an exponent tree: a rational number, as a `Fraction` when it is small."""
    try:  # most exponents are plain rationals: no factoring needed
        q = exact.evaluate(node).as_rational()
    except NotExact:
        q = None
    if q is not None:
        return q
    v = value(node)
    if v == ZERO:
        return Fraction(0)
    return _as_exponent(v)  # type: ignore[arg-type]


# -- exponents --------------------------------------------------------------------------------

def _as_exponent(v: Powers) -> Exp:
    """A rational `Powers` as an exponent: a `Fraction` when small, itself when huge."""
    if any(not _is_integer(x) for _, x in v.exps):
        raise NotExact("irrational exponent")
    bits = sum(abs(x) * math.log2(p) if isinstance(x, Fraction) else math.inf for p, x in v.exps)
    if bits > LIMIT_BITS:
        return v
    num, den = 1, 1
    for p, x in v.exps:
        k = int(x)  # type: ignore[arg-type]
        if k > 0:
            num *= p**k
        else:
            den *= p ** (-k)
    return Fraction(v.sign * num, den)


def _is_integer(x: Exp) -> bool:
    """Whether an exponent is an integer (a huge `Powers` one is when its own exponents are
    non-negative integers; its sign does not matter)."""
    if isinstance(x, Fraction):
        return x.denominator == 1
    return all(_is_natural(y) for _, y in x.exps)


def _is_natural(y: Exp) -> bool:
    if isinstance(y, Fraction):
        return y.denominator == 1 and y >= 0
    return y.sign > 0 and _is_integer(y)


def _exp_powers(x: Exp) -> Powers:
    """Any exponent in `Powers` form (factoring a `Fraction`)."""
    if isinstance(x, Powers):
        return x
    if x == 0:
        raise NotExact("zero has no factorisation")
    return _from_rational(x)


def _exp_normal(v: Powers) -> Exp:
    return _as_exponent(v)


def _exp_add(x: Exp, y: Exp) -> Exp:
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        s = x + y
        if s.numerator.bit_length() > LIMIT_BITS or s.denominator.bit_length() > LIMIT_BITS:
            return _exp_normal(_exp_powers(s))
        return s
    if isinstance(x, Fraction) and x == 0:
        return y
    if isinstance(y, Fraction) and y == 0:
        return x
    if x == y:
        return _exp_mul(x, Fraction(2))
    if isinstance(x, Powers) and isinstance(y, Powers) and x.exps == y.exps and x.sign == -y.sign:
        return Fraction(0)
    raise NotExact("sum of unequal huge exponents")


def _exp_mul(x: Exp, y: Exp) -> Exp:
    if isinstance(x, Fraction) and isinstance(y, Fraction):
        bits = max(x.numerator.bit_length() + y.numerator.bit_length(), x.denominator.bit_length() + y.denominator.bit_length())
        if bits <= LIMIT_BITS:
            return x * y
    if x == 0 or y == 0:
        return Fraction(0)
    product = _mul(_exp_powers(x), _exp_powers(y))
    return _exp_normal(product)  # type: ignore[arg-type]


# -- values -----------------------------------------------------------------------------------

def _mul(a: Powers | str, b: Powers | str) -> Powers | str:
    if a == ZERO or b == ZERO:
        return ZERO
    exps: dict[int, Exp] = dict(a.exps)  # type: ignore[union-attr]
    for p, x in b.exps:  # type: ignore[union-attr]
        exps[p] = _exp_add(exps[p], x) if p in exps else x
    return _make(a.sign * b.sign, exps)  # type: ignore[union-attr]


def _power(v: Powers | str, e: Exp) -> Powers | str:
    if v == ZERO:
        if isinstance(e, Fraction) and e > 0 or isinstance(e, Powers) and e.sign > 0:
            return ZERO
        raise NotExact("zero to a non-positive power")
    assert isinstance(v, Powers)
    sign = 1
    if v.sign < 0:
        if isinstance(e, Fraction):
            if e.denominator % 2 == 0:
                raise NotExact("even root of a negative number")
            sign = -1 if e.numerator % 2 else 1  # real odd roots (the checker's convention)
        elif _is_integer(e):
            sign = 1 if any(p == 2 for p, _ in e.exps) else -1  # a huge integer is even iff 2 divides it
        else:
            raise NotExact("huge non-integer power of a negative number")
    return _make(sign, {p: _exp_mul(x, e) for p, x in v.exps})


def _make(sign: int, exps: dict[int, Exp]) -> Powers:
    kept = tuple(sorted((p, x) for p, x in exps.items() if not (isinstance(x, Fraction) and x == 0)))
    if len(kept) > MAX_FACTORS:
        raise NotExact("too many prime factors")
    return Powers(sign, kept)


def _from_rational(q: Fraction) -> Powers:
    exps: dict[int, Exp] = {}
    for p, k in _factor(q.numerator if q > 0 else -q.numerator).items():
        exps[p] = Fraction(k)
    for p, k in _factor(q.denominator).items():
        exps[p] = Fraction(-k)
    return _make(1 if q > 0 else -1, exps)


# -- integer factorisation --------------------------------------------------------------------

_SMALL_PRIMES = [p for p in range(2, 1000) if all(p % d for d in range(2, int(p**0.5) + 1))]


@lru_cache(maxsize=4096)
def _factor(n: int) -> dict[int, int]:
    """Prime factorisation of ``n ≥ 1``: trial division, then Pollard's rho below 2^64, then
    perfect powers of such numbers; anything else raises `NotExact`."""
    out: dict[int, int] = {}
    for p in _SMALL_PRIMES:
        if n % p == 0:
            k = 0
            while n % p == 0:
                n //= p
                k += 1
            out[p] = k
        if n == 1:
            return out
    for p, k in _factor_large(n).items():
        out[p] = out.get(p, 0) + k
    return out


def _factor_large(n: int) -> dict[int, int]:
    if n == 1:
        return {}
    if n.bit_length() <= 64:
        if _is_prime(n):
            return {n: 1}
        d = _rho(n)
        out = _factor_large(d)
        for p, k in _factor_large(n // d).items():
            out[p] = out.get(p, 0) + k
        return out
    # n has no prime factor below 1000 (trial division ran first); n = m^k with m < 2^64
    # means k lies in [bits/64, bits/10]
    bits = n.bit_length()
    for k in range(max(2, bits // 64), min(bits // 10, MAX_ROOT_DEGREE) + 1):
        m = exact.integer_root(n, k)
        for cand in (m, m + 1):
            if cand.bit_length() <= 64 and cand**k == n:
                return {p: e * k for p, e in _factor_large(cand).items()}
    raise NotExact("integer too large to factor")


_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)  # deterministic below 3.3e24


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in _MR_BASES:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _rho(n: int) -> int:
    """A non-trivial factor of the composite ``n`` (Pollard's rho, Brent's cycle finding)."""
    if n % 2 == 0:
        return 2
    for c in range(1, 64):
        y, r, q, g = 2, 1, 1, 1
        x = ys = y
        while g == 1:
            x = y
            for _ in range(r):
                y = (y * y + c) % n
            k = 0
            while k < r and g == 1:
                ys = y
                for _ in range(min(128, r - k)):
                    y = (y * y + c) % n
                    q = q * abs(x - y) % n
                g = math.gcd(q, n)
                k += 128
            r *= 2
        if g == n:
            g = 1
            while g == 1:
                ys = (ys * ys + c) % n
                g = math.gcd(abs(x - ys), n)
        if g != n:
            return g
    raise NotExact("could not factor")
