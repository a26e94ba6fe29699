"""The answer tree: what a parsed answer *is*, independent of how it was written.

The parser (`envs.math.parser`) builds these nodes from LaTeX or plain text; the comparison
(`envs.math.compare`) walks them. Nodes are small frozen dataclasses, so two answers that were
written differently but normalise to the same tree compare equal with ``==`` and no algebra.

The constructors `add`, `mul`, `neg`, `div` flatten nested sums and products, fold rational
constants and sort operands into a canonical order, so ``x+1`` and ``1+x`` are the same tree.
Powers are never evaluated here: ``9^{9^{9^9}}`` stays a small tree (see `envs.math.exact` for
guarded evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Union


@dataclass(frozen=True, slots=True)
class Num:
    """An exact rational number (integers, decimals, fractions of literals, repeating decimals)."""

    value: Fraction


@dataclass(frozen=True, slots=True)
class Sym:
    """A variable (``x``, ``theta``, ``x_1``)."""

    name: str


@dataclass(frozen=True, slots=True)
class Const:
    """A named constant: ``pi``, ``e`` (Euler's number), ``i`` (imaginary unit), ``oo`` (infinity)."""

    name: str


@dataclass(frozen=True, slots=True)
class Add:
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Mul:
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Pow:
    base: Node
    exp: Node


@dataclass(frozen=True, slots=True)
class Func:
    """A whitelisted function applied to arguments (``sin``, ``log`` with base, ``abs``, ...)."""

    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class PlusMinus:
    """``a ± b``: stands for the two answers ``a + b`` and ``a - b`` (see `expand_pm`)."""

    a: Node
    b: Node


@dataclass(frozen=True, slots=True)
class Percent:
    """``x%``. Inside arithmetic it is ``x/100``; as a whole answer see the comparison policy."""

    x: Node


@dataclass(frozen=True, slots=True)
class Degrees:
    """``x°``. Inside arithmetic it is ``x·π/180``; as a whole answer see the comparison policy."""

    x: Node


@dataclass(frozen=True, slots=True)
class Tuple:
    """An ordered tuple ``(a, b, ...)`` or vector ``\\langle a, b \\rangle``."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class SetOf:
    """An explicit set ``\\{a, b\\}`` (order and repetition do not matter)."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Answers:
    """Several answers written as a bare list: ``1, 2`` or ``x = 1 or x = 2`` (unordered)."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Interval:
    """A real interval; endpoints may be ``Const('oo')`` or its negation."""

    lo: Node
    hi: Node
    left_open: bool
    right_open: bool


@dataclass(frozen=True, slots=True)
class Union_:
    """A union of intervals (and sets): ``(-\\infty, 1) \\cup (2, \\infty)``."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Intersect:
    """``A \\cap B \\cap ...`` (also the conditions of a set-builder ``\\{x \\mid x > 1, x < 5\\}``)."""

    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class SetDiff:
    """``A \\setminus B``."""

    a: Node
    b: Node


@dataclass(frozen=True, slots=True)
class Matrix:
    rows: tuple[tuple[Node, ...], ...]


@dataclass(frozen=True, slots=True)
class Relation:
    """A chain ``t0 op0 t1 op1 t2 ...`` with ops among ``= < <= > >= !=`` (equations, inequalities)."""

    ops: tuple[str, ...]
    terms: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Assignments:
    """Named values ``x = 1, y = 3`` or ``(p, q) = (3, 2)``: ``names`` in the order written.

    Built by the comparison (never by the parser) from equations that assign constants to
    variables or labels; compared by name with another assignment, by position with a tuple."""

    names: tuple[str, ...]
    values: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Text:
    """A textual answer (``Monday``, ``(C)``, ``even``), lower-cased and whitespace-collapsed."""

    value: str


@dataclass(frozen=True, slots=True)
class EmptySet:
    """``\\varnothing``, ``\\emptyset``, ``\\{\\}``, "no solution", "none"."""


Node = Union[
    Num, Sym, Const, Add, Mul, Pow, Func, PlusMinus, Percent, Degrees, Tuple, SetOf, Answers,
    Interval, Union_, Intersect, SetDiff, Matrix, Relation, Assignments, Text, EmptySet,
]

ZERO, ONE, MINUS_ONE = Num(Fraction(0)), Num(Fraction(1)), Num(Fraction(-1))
PI, E, I, OO = Const("pi"), Const("e"), Const("i"), Const("oo")
SCALAR_TYPES = (Num, Sym, Const, Add, Mul, Pow, Func, Percent, Degrees)


def _key(node: Node) -> str:
    # repr of frozen dataclasses is deterministic: a total order for canonical operand sorting
    return repr(node)


def _coeff_term(t: Node) -> tuple[Fraction, Node]:
    """``3·x·y`` → (3, x·y): a term's rational coefficient and the rest."""
    if isinstance(t, Mul):
        nums = [a for a in t.args if isinstance(a, Num)]
        if nums:  # mul() folds constants, so there is at most one
            rest = tuple(a for a in t.args if not isinstance(a, Num))
            return nums[0].value, rest[0] if len(rest) == 1 else Mul(rest)
    return Fraction(1), t


def add(*args: Node) -> Node:
    """A canonical sum: flattened, like terms collected (``x + x = 2x``), operands sorted."""
    coeffs: dict[Node, Fraction] = {}
    const = Fraction(0)
    for a in args:
        for t in a.args if isinstance(a, Add) else (a,):
            if isinstance(t, Num):
                const += t.value
            else:
                c, rest = _coeff_term(t)
                coeffs[rest] = coeffs.get(rest, Fraction(0)) + c
    flat = [mul(Num(c), rest) if c != 1 else rest for rest, c in coeffs.items() if c != 0]
    if const:
        flat.append(Num(const))
    if not flat:
        return ZERO
    if len(flat) == 1:
        return flat[0]
    return Add(tuple(sorted(flat, key=_key)))


def mul(*args: Node) -> Node:
    """A canonical product: flattened, rational constants folded, powers of one base combined
    (``x·x^{-1} = 1``, valid for principal powers of x ≠ 0), operands sorted."""
    exps: dict[Node, list[Node]] = {}
    const = Fraction(1)
    for a in args:
        for t in a.args if isinstance(a, Mul) else (a,):
            if isinstance(t, Num):
                const *= t.value
            elif isinstance(t, Pow):
                exps.setdefault(t.base, []).append(t.exp)
            else:
                exps.setdefault(t, []).append(ONE)
    if const == 0 and ZERO not in exps:
        return ZERO  # (0/0 keeps its Pow(0, -1): undefined, not zero)
    flat: list[Node] = []
    for base, es in exps.items():
        e = es[0] if len(es) == 1 else add(*es)
        if e == ZERO:
            continue
        flat.append(base if e == ONE else Pow(base, e))
    if const != 1 or not flat and const == 0:
        flat.append(Num(const))
    if not flat:
        return ONE
    if len(flat) == 1:
        return flat[0]
    return Mul(tuple(sorted(flat, key=_key)))


def neg(a: Node) -> Node:
    return mul(MINUS_ONE, a)


def div(a: Node, b: Node) -> Node:
    if isinstance(b, Num) and b.value != 0:
        return mul(a, Num(1 / b.value))
    return mul(a, power(b, MINUS_ONE))


def power(base: Node, exp: Node) -> Node:
    """``base^exp`` with only structural simplifications (``x^1 = x``, ``(b^e)^n = b^{e·n}``
    for integer n); never evaluates, so ``9^{9^{9^9}}`` stays a small tree."""
    if exp == ONE:
        return base
    if isinstance(base, Pow) and isinstance(exp, Num) and exp.value.denominator == 1:
        return power(base.base, mul(base.exp, exp))
    return Pow(base, exp)


def is_neg_infinity(node: Node) -> bool:
    return isinstance(node, Mul) and len(node.args) == 2 and OO in node.args and MINUS_ONE in node.args


def is_infinite(node: Node) -> bool:
    return node == OO or is_neg_infinity(node)


def walk(node: Node):
    """Every node of the tree, depth first (iterative: trees may be deep)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(children(n))


def children(n: Node) -> tuple[Node, ...]:
    if isinstance(n, (Add, Mul, Tuple, SetOf, Answers, Union_, Intersect)):
        return n.items if hasattr(n, "items") else n.args  # type: ignore[union-attr]
    if isinstance(n, Pow):
        return (n.base, n.exp)
    if isinstance(n, Func):
        return n.args
    if isinstance(n, PlusMinus):
        return (n.a, n.b)
    if isinstance(n, (Percent, Degrees)):
        return (n.x,)
    if isinstance(n, Interval):
        return (n.lo, n.hi)
    if isinstance(n, SetDiff):
        return (n.a, n.b)
    if isinstance(n, Matrix):
        return tuple(x for row in n.rows for x in row)
    if isinstance(n, Relation):
        return n.terms
    if isinstance(n, Assignments):
        return n.values
    return ()


def free_symbols(node: Node) -> frozenset[str]:
    return frozenset(n.name for n in walk(node) if isinstance(n, Sym))


def size(node: Node) -> int:
    return sum(1 for _ in walk(node))


def expand_pm(node: Node) -> list[Node]:
    """The answers a tree with ``±`` stands for: ``1 ± √2`` → ``[1 + √2, 1 - √2]``.

    Without ``±`` the list is ``[node]``. At most 8 alternatives (three ``±``) are expanded.
    """
    if not any(isinstance(n, PlusMinus) for n in walk(node)):
        return [node]
    out: list[Node] = []
    _expand(node, out)
    return out[:8]


def _expand(node: Node, out: list[Node]) -> None:
    # replace the first PlusMinus found by each sign, recurse until none is left
    for sign in (1, -1):
        replaced = _replace_first_pm(node, sign)
        if replaced is None:
            out.append(node)
            return
        if len(out) >= 8:
            return
        _expand(replaced, out)


def _replace_first_pm(node: Node, sign: int) -> Node | None:
    if isinstance(node, PlusMinus):
        return add(node.a, node.b if sign > 0 else neg(node.b))
    if isinstance(node, Add):
        return _rebuild_seq(node.args, sign, lambda xs: add(*xs))
    if isinstance(node, Mul):
        return _rebuild_seq(node.args, sign, lambda xs: mul(*xs))
    if isinstance(node, Pow):
        r = _rebuild_seq((node.base, node.exp), sign, lambda xs: Pow(xs[0], xs[1]))
        return r
    if isinstance(node, Func):
        return _rebuild_seq(node.args, sign, lambda xs: Func(node.name, tuple(xs)))
    if isinstance(node, (Tuple, SetOf, Answers)):
        return _rebuild_seq(node.items, sign, lambda xs: type(node)(tuple(xs)))
    if isinstance(node, Relation):
        return _rebuild_seq(node.terms, sign, lambda xs: Relation(node.ops, tuple(xs)))
    return None


def _rebuild_seq(items, sign, build):
    for k, item in enumerate(items):
        r = _replace_first_pm(item, sign)
        if r is not None:
            return build([*items[:k], r, *items[k + 1:]])
    return None


# -- printing ---------------------------------------------------------------------------------

_FUNC_NAMES = {"abs": "abs", "sqrt": "sqrt"}


def to_text(node: Node) -> str:
    """A readable, canonical rendering (shown by ``rlvr verify`` as the normalised form)."""
    if isinstance(node, Num):
        v = node.value
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
    if isinstance(node, Sym):
        return node.name
    if isinstance(node, Const):
        return {"oo": "oo", "pi": "pi", "e": "e", "i": "i"}[node.name]
    if isinstance(node, Add):
        out = to_text(node.args[0])
        for t in node.args[1:]:
            s = to_text(t)
            out += f" - {s[1:]}" if s.startswith("-") else f" + {s}"
        return out
    if isinstance(node, Mul):
        parts = sorted(node.args, key=lambda a: not isinstance(a, Num))  # coefficient first
        if parts[0] == MINUS_ONE:
            return "-" + "*".join(_wrap(p) for p in parts[1:])
        return "*".join(_wrap(p) for p in parts)
    if isinstance(node, Pow):
        return f"{_wrap(node.base)}^{_wrap(node.exp)}"
    if isinstance(node, Func):
        return f"{_FUNC_NAMES.get(node.name, node.name)}({', '.join(to_text(a) for a in node.args)})"
    if isinstance(node, PlusMinus):
        return f"{to_text(node.a)} ± {_wrap(node.b)}"
    if isinstance(node, Percent):
        return f"{_wrap(node.x)}%"
    if isinstance(node, Degrees):
        return f"{_wrap(node.x)}°"
    if isinstance(node, Tuple):
        return f"({', '.join(to_text(x) for x in node.items)})"
    if isinstance(node, SetOf):
        return f"{{{', '.join(to_text(x) for x in node.items)}}}"
    if isinstance(node, Answers):
        return " ; ".join(to_text(x) for x in node.items)
    if isinstance(node, Interval):
        return f"{'(' if node.left_open else '['}{to_text(node.lo)}, {to_text(node.hi)}{')' if node.right_open else ']'}"
    if isinstance(node, Union_):
        return " U ".join(to_text(x) for x in node.items)
    if isinstance(node, Intersect):
        return " ∩ ".join(_wrap(x) for x in node.items)
    if isinstance(node, SetDiff):
        return f"{_wrap(node.a)} \\ {_wrap(node.b)}"
    if isinstance(node, Matrix):
        return "[" + "; ".join(", ".join(to_text(x) for x in row) for row in node.rows) + "]"
    if isinstance(node, Relation):
        out = to_text(node.terms[0])
        for op, t in zip(node.ops, node.terms[1:]):
            out += f" {op} {to_text(t)}"
        return out
    if isinstance(node, Assignments):
        return ", ".join(f"{k} = {to_text(v)}" for k, v in zip(node.names, node.values))
    if isinstance(node, Text):
        return repr(node.value)
    if isinstance(node, EmptySet):
        return "{}"
    raise TypeError(f"not an answer node: {node!r}")


def _wrap(node: Node) -> str:
    s = to_text(node)
    simple = isinstance(node, (Sym, Const, Func, Tuple, Matrix)) or (isinstance(node, Num) and node.value.denominator == 1 and node.value >= 0)
    return s if simple else f"({s})"
