"""Exact arithmetic on answer trees, in pure Python: the fast path that decides most comparisons
without sympy.

Values live in the field Q(i, √2, √3, √5, ...): a value is a finite sum ``Σ c_n·√n`` over distinct
square-free integers ``n ≥ 1`` with Gaussian-rational coefficients ``c_n``. Square roots of
distinct square-free integers are linearly independent over Q(i), so two values are equal exactly
when their coefficient maps are equal: ``\\sqrt{8}``, ``2\\sqrt2`` and ``4/\\sqrt{2}`` all become
``{2: 2}``. Division by a sum of radicals rationalises by conjugates.

Answers with variables (or π and e) are compared by evaluating both sides at random rational points
(`identical`): a rational function that is not identically zero vanishes at a random point of a
set of size S with probability at most deg/S (Schwartz–Zippel), so agreement at three points drawn
from 2^31 values is equality up to a negligible chance. This is only applied where it is sound:
square roots, absolute values and other non-rational functions of a variable are refused
(`NotExact`), and such answers go to the symbolic path.

Every operation checks sizes first (`MAX_BITS`): ``9^{9^{9^9}}`` raises `TooLarge` in
microseconds instead of exhausting memory.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from functools import lru_cache

from envs.math import nodes as N

MAX_BITS = 20_000
"""Largest numerator/denominator (in bits) exact arithmetic will build (about 6,000 digits)."""

MAX_TERMS = 64
"""Most radical terms a value may have (bounds conjugate rationalisation)."""

MAX_FACTOR = 10**12
"""Radicands are factored by trial division only below this size."""


class NotExact(Exception):
    """The tree is outside what exact arithmetic decides (trig, logs, nested radicals, ...)."""


class TooLarge(NotExact):
    """The exact value would exceed `MAX_BITS`; the answer is compared only structurally."""


class Undefined(NotExact):
    """Division by zero or an undefined operation at this point."""


Gauss = tuple[Fraction, Fraction]  # re, im
_ZERO = Fraction(0)
_ONE = Fraction(1)


def _check(f: Fraction) -> Fraction:
    if f.numerator.bit_length() > MAX_BITS or f.denominator.bit_length() > MAX_BITS:
        raise TooLarge("number too large for exact arithmetic")
    return f


def _gmul(a: Gauss, b: Gauss) -> Gauss:
    return (_check(a[0] * b[0] - a[1] * b[1]), _check(a[0] * b[1] + a[1] * b[0]))


def _ginv(a: Gauss) -> Gauss:
    d = a[0] * a[0] + a[1] * a[1]
    if d == 0:
        raise Undefined("division by zero")
    return (_check(a[0] / d), _check(-a[1] / d))


class Alg:
    """An element ``Σ c_n·√n`` of Q(i, √2, √3, ...); immutable, compared exactly."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[int, Gauss]):
        self.terms = {n: c for n, c in terms.items() if c[0] or c[1]}
        if len(self.terms) > MAX_TERMS:
            raise TooLarge("too many radical terms")

    @staticmethod
    def rational(q: Fraction) -> Alg:
        return Alg({1: (q, _ZERO)})

    @staticmethod
    def gauss(re: Fraction, im: Fraction) -> Alg:
        return Alg({1: (re, im)})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Alg) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.terms.items())))

    def __repr__(self) -> str:
        return f"Alg({self.terms})"

    def is_zero(self) -> bool:
        return not self.terms

    def as_rational(self) -> Fraction | None:
        if not self.terms:
            return _ZERO
        if set(self.terms) == {1} and self.terms[1][1] == 0:
            return self.terms[1][0]
        return None

    def as_gauss(self) -> Gauss | None:
        if not self.terms:
            return (_ZERO, _ZERO)
        if set(self.terms) == {1}:
            return self.terms[1]
        return None

    def is_real(self) -> bool:
        return all(c[1] == 0 for c in self.terms.values())

    def approx(self) -> complex:
        return sum((complex(float(c[0]), float(c[1])) * math.sqrt(n) for n, c in self.terms.items()), 0j)

    def __add__(self, other: Alg) -> Alg:
        out = dict(self.terms)
        for n, c in other.terms.items():
            a = out.get(n, (_ZERO, _ZERO))
            out[n] = (_check(a[0] + c[0]), _check(a[1] + c[1]))
        return Alg(out)

    def __neg__(self) -> Alg:
        return Alg({n: (-c[0], -c[1]) for n, c in self.terms.items()})

    def __sub__(self, other: Alg) -> Alg:
        return self + (-other)

    def __mul__(self, other: Alg) -> Alg:
        out: dict[int, Gauss] = {}
        for n1, c1 in self.terms.items():
            for n2, c2 in other.terms.items():
                g = math.gcd(n1, n2)
                n = (n1 // g) * (n2 // g)  # √n1·√n2 = g·√(n1·n2/g²); the quotient stays square-free
                c = _gmul(c1, c2)
                if g != 1:
                    c = (c[0] * g, c[1] * g)
                a = out.get(n, (_ZERO, _ZERO))
                out[n] = (_check(a[0] + c[0]), _check(a[1] + c[1]))
        return Alg(out)

    def inverse(self, depth: int = 0) -> Alg:
        if not self.terms:
            raise Undefined("division by zero")
        if len(self.terms) == 1:
            (n, c), = self.terms.items()
            inv = _ginv(c)
            return Alg({n: (inv[0] / n, inv[1] / n)})  # 1/(c√n) = √n/(c·n)
        if depth > 8:
            raise NotExact("denominator too complicated to rationalise")
        # x = A + B·√p for a prime p dividing some radicand; 1/x = (A - B√p) / (A² - p·B²)
        p = _smallest_prime_factor(max(self.terms))
        a_part: dict[int, Gauss] = {}
        b_part: dict[int, Gauss] = {}
        for n, c in self.terms.items():
            if n % p == 0:
                b_part[n // p] = c
            else:
                a_part[n] = c
        A, B = Alg(a_part), Alg(b_part)
        denom = A * A - Alg.rational(Fraction(p)) * B * B
        conj = A - B * Alg({p: (_ONE, _ZERO)})
        return conj * denom.inverse(depth + 1)

    def __truediv__(self, other: Alg) -> Alg:
        return self * other.inverse()

    def power(self, k: int) -> Alg:
        if k < 0:
            return self.inverse().power(-k)
        if k == 0:
            return Alg.rational(_ONE)
        bits = max((max(c[0].numerator.bit_length(), c[0].denominator.bit_length(), c[1].numerator.bit_length(), c[1].denominator.bit_length()) for c in self.terms.values()), default=1)
        if (bits + 1) * k > MAX_BITS or (len(self.terms) > 1 and k > 64):
            raise TooLarge(f"power {k} too large for exact arithmetic")
        result, base = Alg.rational(_ONE), self
        while k:
            if k & 1:
                result = result * base
            k >>= 1
            if k:
                base = base * base
        return result


def _smallest_prime_factor(n: int) -> int:
    if n % 2 == 0:
        return 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return f
        f += 2
    return n


@lru_cache(maxsize=4096)
def _square_free(n: int) -> tuple[int, int]:
    """``n = s²·m`` with ``m`` square-free; returns ``(s, m)``. Raises NotExact for huge n."""
    if n > MAX_FACTOR:
        r = math.isqrt(n)
        if r * r == n:
            return r, 1
        raise NotExact("radicand too large to factor")
    s, m, f = 1, 1, 2
    while f * f <= n:
        e = 0
        while n % f == 0:
            n //= f
            e += 1
        s *= f ** (e // 2)
        if e % 2:
            m *= f
        f += 1 if f == 2 else 2
    return s, m * n


def sqrt_rational(q: Fraction) -> Alg:
    """The principal square root of a rational, exactly (``√(-4) = 2i``, ``√(1/2) = √2/2``)."""
    if q == 0:
        return Alg({})
    neg = q < 0
    q = abs(q)
    s, m = _square_free(q.numerator * q.denominator)
    coeff = Fraction(s, q.denominator)
    return Alg({m: (_ZERO, coeff) if neg else (coeff, _ZERO)})


def _int_root(n: int, k: int) -> int | None:
    if n < 0:
        return None
    if n.bit_length() > MAX_BITS:
        raise TooLarge("radicand too large")
    r = round(n ** (1.0 / k)) if n.bit_length() < 1000 else integer_root(n, k)
    for cand in (r - 1, r, r + 1):
        if cand >= 0 and cand**k == n:
            return cand
    return None


def integer_root(n: int, k: int) -> int:
    """⌊n^(1/k)⌋ for a positive integer of any size (Newton's method on integers)."""
    x = 1 << ((n.bit_length() + k - 1) // k)
    while True:
        y = ((k - 1) * x + n // x ** (k - 1)) // k
        if y >= x:
            return x
        x = y


def root_rational(q: Fraction, k: int) -> Alg:
    """The k-th root of a rational when it is rational (odd roots of negatives are real)."""
    if k == 2:
        return sqrt_rational(q)
    sign = -1 if q < 0 else 1
    if sign < 0 and k % 2 == 0:
        raise NotExact("even root of a negative number")
    num, den = _int_root(abs(q.numerator), k), _int_root(q.denominator, k)
    if num is None or den is None:
        raise NotExact("irrational higher root")
    return Alg.rational(Fraction(sign * num, den))


# -- evaluation -------------------------------------------------------------------------------

Env = dict[str, Alg]


def evaluate(node: N.Node, env: Env | None = None) -> Alg:
    """The exact value of a scalar tree; variables (and ``pi``/``e`` when formal) from ``env``.

    Raises `NotExact` (or `TooLarge`, `Undefined`) when the tree is outside exact arithmetic.
    """
    env = env or {}
    return _eval(node, env)


def _eval(node: N.Node, env: Env) -> Alg:
    if isinstance(node, N.Num):
        return Alg.rational(_check(node.value))
    if isinstance(node, N.Add):
        acc = Alg({})
        for a in node.args:
            acc = acc + _eval(a, env)
        return acc
    if isinstance(node, N.Mul):
        acc = Alg.rational(_ONE)
        for a in node.args:
            acc = acc * _eval(a, env)
        return acc
    if isinstance(node, N.Sym):
        if node.name in env:
            return env[node.name]
        raise NotExact(f"free variable {node.name}")
    if isinstance(node, N.Const):
        if node.name == "i":
            return Alg.gauss(_ZERO, _ONE)
        if node.name in env:
            return env[node.name]
        raise NotExact(f"constant {node.name}")
    if isinstance(node, N.Pow):
        return _pow(node, env)
    if isinstance(node, N.Func):
        return _func(node, env)
    if isinstance(node, N.Percent):
        return _eval(node.x, env) * Alg.rational(Fraction(1, 100))
    if isinstance(node, N.Degrees):
        if "pi" not in env:
            raise NotExact("degrees need pi")
        return _eval(node.x, env) * env["pi"] * Alg.rational(Fraction(1, 180))
    raise NotExact(f"{type(node).__name__} is not a scalar")


def _depends(node: N.Node, env: Env) -> bool:
    """Whether ``node`` involves anything ``env`` treats as a formal variable."""
    return bool(env) and any((isinstance(n, N.Sym) and n.name in env) or (isinstance(n, N.Const) and n.name in env) for n in N.walk(node))


def _pow(node: N.Pow, env: Env) -> Alg:
    exp = _eval(node.exp, env) if not _depends(node.exp, env) else None
    q = exp.as_rational() if exp is not None else None
    if q is None:
        raise NotExact("non-rational exponent")
    if q.denominator == 1:
        if abs(q.numerator) > 100_000:
            raise TooLarge(f"exponent {q} too large")
        base = _eval(node.base, env)
        if base.is_zero() and q < 0:
            raise Undefined("zero to a negative power")
        return base.power(int(q))
    if _depends(node.base, env):
        raise NotExact("root of a variable expression")
    base_q = _eval(node.base, env).as_rational()
    if base_q is None:
        raise NotExact("root of an irrational number")
    if abs(q.numerator) > 10_000 or q.denominator > 64:
        raise TooLarge("exponent too large")
    if base_q < 0 and q.denominator % 2 == 0:
        if q.denominator == 2:
            return sqrt_rational(base_q).power(q.numerator)
        raise NotExact("even root of a negative number")
    if q.denominator == 2:
        return sqrt_rational(base_q).power(q.numerator)
    return root_rational(base_q, q.denominator).power(q.numerator)  # odd roots of negatives are real


def _func(node: N.Func, env: Env) -> Alg:
    name = node.name
    if any(_depends(a, env) for a in node.args):
        raise NotExact(f"{name} of a variable expression")
    if name == "sqrt":
        v = _eval(node.args[0], env)
        q = v.as_rational()
        if q is None:
            raise NotExact("nested radical")
        return sqrt_rational(q)
    if name == "abs":
        v = _eval(node.args[0], env)
        g = v.as_gauss()
        if g is not None:
            return sqrt_rational(g[0] * g[0] + g[1] * g[1]) if g[1] else Alg.rational(abs(g[0]))
        if v.is_real():
            x = v.approx().real
            if abs(x) < 1e-9:
                raise NotExact("sign too close to call")
            return v if x > 0 else -v
        raise NotExact("abs of a complex radical")
    if name in ("factorial", "binom", "gcd", "lcm", "floor", "ceil"):
        vals = [_eval(a, env).as_rational() for a in node.args]
        if any(v is None for v in vals):
            raise NotExact(f"{name} of an irrational number")
        return Alg.rational(_integer_func(name, vals))  # type: ignore[arg-type]
    raise NotExact(f"function {name}")


def _integer_func(name: str, vals: list[Fraction]) -> Fraction:
    if name in ("floor", "ceil"):
        v = vals[0]
        return Fraction(math.floor(v) if name == "floor" else math.ceil(v))
    if any(v.denominator != 1 for v in vals):
        raise NotExact(f"{name} of a non-integer")
    ints = [int(v) for v in vals]
    if name == "factorial":
        if not 0 <= ints[0] <= 1500:
            raise TooLarge("factorial argument out of range")
        return Fraction(math.factorial(ints[0]))
    if name == "binom":
        n, k = ints
        if not 0 <= n <= 5000:
            raise TooLarge("binomial argument out of range")
        return Fraction(math.comb(n, k) if k >= 0 else 0)
    if abs(ints[0]).bit_length() > MAX_BITS or abs(ints[-1]).bit_length() > MAX_BITS:
        raise TooLarge("gcd argument too large")
    return Fraction(math.gcd(*ints) if name == "gcd" else math.lcm(*ints))


# -- comparison -------------------------------------------------------------------------------

IDENTITY_POINTS = 3


def formal_names(*trees: N.Node) -> list[str]:
    """Variables plus ``pi``/``e`` (treated as formal variables when comparing)."""
    names: set[str] = set()
    for t in trees:
        for n in N.walk(t):
            if isinstance(n, N.Sym) or (isinstance(n, N.Const) and n.name in ("pi", "e")) or isinstance(n, N.Degrees):
                names.add(n.name if not isinstance(n, N.Degrees) else "pi")
    return sorted(names)


def identical(a: N.Node, b: N.Node) -> bool | None:
    """Exact comparison of two scalar trees: True, False, or None when exact arithmetic cannot
    decide (then the caller tries numeric refutation and sympy).

    Without variables the answer is certain. With variables it is a randomized identity test
    (see module docstring); with ``pi``/``e`` a formal difference is reported as None so the
    caller confirms it numerically (π and e are not known to be algebraically independent).
    """
    names = formal_names(a, b)
    if not names:
        return evaluate(a) == evaluate(b)
    rng = random.Random("|".join(names))  # deterministic: the same pair always gets the same verdict
    agreed = 0
    for _ in range(IDENTITY_POINTS * 4):
        env = {name: Alg.rational(Fraction(rng.randrange(1 << 20, 1 << 31), rng.randrange(1, 1 << 10))) for name in names}
        try:
            va, vb = _eval(a, env), _eval(b, env)
        except Undefined:
            continue  # a pole at this point: draw another
        if va != vb:
            only_constants = all(n in ("pi", "e") for n in names)
            return None if only_constants or "pi" in names or "e" in names else False
        agreed += 1
        if agreed == IDENTITY_POINTS:
            return True
    return None
