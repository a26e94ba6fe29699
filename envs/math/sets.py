"""Sets of real numbers in a canonical form, and one-variable inequalities solved into them.

A subset of the real line written with intervals, unions and finite sets
(``[-2,-1] \\cup [1,2]``, ``\\{-1\\} \\cup [0,7)``, ``(1,2) \\cup \\{2\\} \\cup (2,3)``) has one
canonical form: disjoint pieces sorted left to right, each ``(lo, hi, lo_open, hi_open)``, with
touching pieces merged (a point is the closed piece ``[a, a]``). Two sets are equal exactly when
their canonical forms have the same pieces, so ``[1,2] \\cup [2,3]`` equals ``[1,3]``.

Endpoints stay exact answer trees. Ordering them is the only numerical step: two endpoints are
ordered by their values only after exact arithmetic (`envs.math.exact`) has shown they differ, and
only when the floating-point gap is unmistakable; otherwise the set is not canonicalised (the
caller falls back to comparing structures) — never a guessed order.

`solve` turns a relation in one variable into its solution set: ``-2x > -6`` into ``(-\\infty, 3)``,
``1 \\le |t| \\le 2`` into ``[-2, -1] \\cup [1, 2]``, for sides that are linear in the variable or
of the form ``α·|linear| + β``, so both sides of a comparison reach the same canonical form.
"""

from __future__ import annotations

from dataclasses import dataclass

from envs.math import exact, numeric
from envs.math import nodes as N

MAX_PIECES = 64
"""Largest number of pieces canonicalised (bounds the sorting work)."""

_GAP = 1e-9


class Undecidable(Exception):
    """The set cannot be put in canonical form (symbolic or unordered endpoints)."""


@dataclass(frozen=True)
class Piece:
    """One interval ``lo..hi`` (``lo == hi`` and closed for a point); infinite ends are open."""

    lo: N.Node
    hi: N.Node
    lo_open: bool
    hi_open: bool


# -- ordering of constant endpoints -----------------------------------------------------------

def _value(x: N.Node) -> float:
    if x == N.OO:
        return float("inf")
    if N.is_neg_infinity(x):
        return float("-inf")
    if N.free_symbols(x) or any(n == N.OO for n in N.walk(x)):
        raise Undecidable("not a real constant")
    try:
        z = numeric.approx(x)
    except numeric.NoValue:
        raise Undecidable("no numeric value") from None
    if abs(z.imag) > _GAP * max(1.0, abs(z.real)):
        raise Undecidable("not real")
    return z.real


def compare(a: N.Node, b: N.Node) -> int:
    """-1, 0 or 1 as ``a <, =, > b`` for real constants or ±∞; raises `Undecidable`."""
    if a == b:
        return 0
    va, vb = _value(a), _value(b)
    if va == vb and abs(va) == float("inf"):
        return 0
    if abs(va) != float("inf") and abs(vb) != float("inf"):
        try:
            same = exact.identical(a, b)
        except exact.NotExact:
            same = None
        if same:
            return 0
        if abs(va - vb) <= _GAP * max(1.0, abs(va), abs(vb)):
            raise Undecidable("endpoints too close to order")  # same=None/False: do not guess
    return -1 if va < vb else 1


# -- canonical form ---------------------------------------------------------------------------

def pieces(node: N.Node, tuple_is_interval: bool = False) -> list[Piece]:
    """The canonical pieces of a set-like tree; raises `Undecidable` when it has none."""
    raw = _raw_pieces(node, tuple_is_interval)
    if len(raw) > MAX_PIECES:
        raise Undecidable("too many pieces")
    return _merge(raw)


def _raw_pieces(node: N.Node, tuple_is_interval: bool) -> list[Piece]:
    if isinstance(node, N.EmptySet):
        return []
    if isinstance(node, N.Interval):
        lo_open = node.left_open or N.is_infinite(node.lo)
        hi_open = node.right_open or N.is_infinite(node.hi)
        order = compare(node.lo, node.hi)
        if order > 0 or order == 0 and (lo_open or hi_open):
            return []  # an empty interval
        return [Piece(node.lo, node.hi, lo_open, hi_open)]
    if isinstance(node, N.Tuple) and tuple_is_interval and len(node.items) == 2:
        return _raw_pieces(N.Interval(node.items[0], node.items[1], True, True), True)
    if isinstance(node, (N.SetOf, N.Answers)):
        out = []
        for x in node.items:
            if isinstance(x, (N.Interval, N.Union_, N.SetOf, N.EmptySet)):
                out.extend(_raw_pieces(x, tuple_is_interval))
            elif isinstance(x, N.SCALAR_TYPES) and not N.is_infinite(x):
                _value(x)  # a real constant, or Undecidable
                out.append(Piece(x, x, False, False))
            else:
                raise Undecidable(f"{type(x).__name__} is not a real number")
        return out
    if isinstance(node, N.Union_):
        return [p for item in node.items for p in _raw_pieces(item, True)]
    if isinstance(node, N.Intersect):
        result = REALS
        for item in node.items:
            result = _intersect(result, _merge(_raw_pieces(item, True)))
        return result
    if isinstance(node, N.SetDiff):
        return _intersect(_merge(_raw_pieces(node.a, True)), _complement(_merge(_raw_pieces(node.b, True))))
    if isinstance(node, N.Relation):  # a condition of a set-builder: its solution set
        solved = solve(node)
        if solved is None:
            raise Undecidable("condition not solvable in one variable")
        return _raw_pieces(solved, True)
    raise Undecidable(f"{type(node).__name__} is not a set of reals")


def _merge(raw: list[Piece]) -> list[Piece]:
    import functools

    def by_lo(p: Piece, q: Piece) -> int:
        c = compare(p.lo, q.lo)
        if c:
            return c
        return (0 if p.lo_open == q.lo_open else (1 if p.lo_open else -1))

    out: list[Piece] = []
    for p in sorted(raw, key=functools.cmp_to_key(by_lo)):
        if not out:
            out.append(p)
            continue
        last = out[-1]
        c = compare(p.lo, last.hi)
        touching = c < 0 or (c == 0 and not (p.lo_open and last.hi_open))
        if not touching:
            out.append(p)
            continue
        h = compare(p.hi, last.hi)
        if h > 0:
            out[-1] = Piece(last.lo, p.hi, last.lo_open, p.hi_open)
        elif h == 0:
            out[-1] = Piece(last.lo, last.hi, last.lo_open, last.hi_open and p.hi_open)
    return out


def to_node(parts: list[Piece]) -> N.Node:
    """A tree for canonical pieces (for display and for the comparison that follows)."""
    items: list[N.Node] = []
    for p in parts:
        if p.lo == p.hi and not p.lo_open:
            items.append(N.SetOf((p.lo,)))
        else:
            items.append(N.Interval(p.lo, p.hi, p.lo_open, p.hi_open))
    if not items:
        return N.EmptySet()
    return items[0] if len(items) == 1 else N.Union_(tuple(items))


def _intersect(xs: list[Piece], ys: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in xs:
        for q in ys:
            c = compare(p.lo, q.lo)
            lo, lo_open = (p.lo, p.lo_open) if c > 0 else (q.lo, q.lo_open) if c < 0 else (p.lo, p.lo_open or q.lo_open)
            c = compare(p.hi, q.hi)
            hi, hi_open = (p.hi, p.hi_open) if c < 0 else (q.hi, q.hi_open) if c > 0 else (p.hi, p.hi_open or q.hi_open)
            order = compare(lo, hi)
            if order < 0 or order == 0 and not (lo_open or hi_open):
                out.append(Piece(lo, hi, lo_open, hi_open))
    return _merge(out)


REALS = [Piece(N.neg(N.OO), N.OO, True, True)]


def _complement(parts: list[Piece]) -> list[Piece]:
    """The reals outside canonical ``parts`` (the gaps between them, openness flipped)."""
    out: list[Piece] = []
    lo, lo_open = N.neg(N.OO), True
    for p in parts:
        order = compare(lo, p.lo)
        if order < 0:
            out.append(Piece(lo, p.lo, lo_open, not p.lo_open))
        elif order == 0 and not lo_open and p.lo_open:  # (.., 2) and (2, ..): the point 2 is outside both
            out.append(Piece(lo, lo, False, False))
        lo, lo_open = p.hi, not p.hi_open
    if lo != N.OO:
        out.append(Piece(lo, N.OO, lo_open, True))
    return out


# -- solving one-variable relations -----------------------------------------------------------

def solve(rel: N.Relation) -> N.Node | None:
    """The solution set of a relation chain in one variable (see module docstring), or None."""
    names = N.free_symbols(rel)
    if len(names) != 1 or not rel.ops or any(op not in ("<", "<=", ">", ">=", "!=") for op in rel.ops):
        return None
    (name,) = names
    try:
        result = REALS
        for j, op in enumerate(rel.ops):
            left, right = rel.terms[j], rel.terms[j + 1]
            if op in (">", ">="):
                left, right, op = right, left, "<" if op == ">" else "<="
            result = _intersect(result, _constraint(N.add(left, N.neg(right)), op, name))
        return to_node(result)
    except (Undecidable, exact.NotExact, RecursionError):
        return None


def _constraint(g: N.Node, op: str, name: str) -> list[Piece]:
    """The set of ``name`` where ``g op 0`` (``op`` in ``< <= !=``)."""
    lin = _linear(g, name)
    if lin is not None:
        a, b = lin
        root = N.div(N.neg(b), a)  # a·v + b op 0  ⇔  v op' -b/a
        return _half_line(root, op, flip=_sign(a) < 0)
    alpha, beta, inner = _abs_form(g, name)
    lin = _linear(inner, name)
    if lin is None:
        raise Undecidable("inside of |...| is not linear")
    c = N.div(N.neg(beta), alpha)  # α|u| + β op 0  ⇔  |u| op' -β/α
    u_set = _abs_set(c, op, flip=_sign(alpha) < 0)
    a, b = lin
    return _preimage(u_set, a, b)


def _linear(g: N.Node, name: str) -> tuple[N.Node, N.Node] | None:
    """``(a, b)`` with ``g = a·v + b`` identically and ``a ≠ 0``, or None."""
    b = substitute(g, name, N.ZERO)
    a = N.add(substitute(g, name, N.ONE), N.neg(b))
    if N.free_symbols(a) or N.free_symbols(b) or a == N.ZERO:
        return None
    try:
        if exact.evaluate(a).is_zero():
            return None
        same = exact.identical(g, N.add(N.mul(a, N.Sym(name)), b))
    except exact.NotExact:
        return None
    return (a, b) if same else None


def _abs_form(g: N.Node, name: str) -> tuple[N.Node, N.Node, N.Node]:
    """``(α, β, u)`` with ``g = α·|u| + β`` structurally (α, β constants)."""
    terms = g.args if isinstance(g, N.Add) else (g,)
    const = [t for t in terms if not N.free_symbols(t)]
    var = [t for t in terms if N.free_symbols(t)]
    if len(var) != 1:
        raise Undecidable("not of the form a|u| + b")
    t = var[0]
    factors = t.args if isinstance(t, N.Mul) else (t,)
    abs_parts = [f for f in factors if isinstance(f, N.Func) and f.name == "abs" and len(f.args) == 1]
    rest = [f for f in factors if f not in abs_parts]
    if len(abs_parts) != 1 or any(N.free_symbols(f) for f in rest):
        raise Undecidable("not of the form a|u| + b")
    return N.mul(*rest) if rest else N.ONE, N.add(*const) if const else N.ZERO, abs_parts[0].args[0]


def _sign(x: N.Node) -> int:
    c = compare(x, N.ZERO)
    if c == 0:
        raise Undecidable("zero coefficient")
    return c


def _half_line(root: N.Node, op: str, flip: bool) -> list[Piece]:
    if op == "!=":
        return [Piece(N.neg(N.OO), root, True, True), Piece(root, N.OO, True, True)]
    closed = op == "<="
    if flip:  # v > root
        return [Piece(root, N.OO, not closed, True)]
    return [Piece(N.neg(N.OO), root, True, not closed)]


def _abs_set(c: N.Node, op: str, flip: bool) -> list[Piece]:
    """The set of ``u`` with ``|u| op c`` (``op`` reversed when ``flip``: ``|u| > c``)."""
    s = compare(c, N.ZERO)
    neg_c = N.neg(c)
    if op == "!=":
        if s < 0:
            return REALS
        return _merge([Piece(N.neg(N.OO), neg_c, True, True), Piece(neg_c, c, True, True), Piece(c, N.OO, True, True)]) if s > 0 else [
            Piece(N.neg(N.OO), N.ZERO, True, True), Piece(N.ZERO, N.OO, True, True)]
    strict = op == "<"
    if not flip:  # |u| < c  or  |u| <= c
        if s < 0 or s == 0 and strict:
            return []
        return [Piece(neg_c, c, strict, strict)]
    # |u| > c  or  |u| >= c
    if s < 0 or s == 0 and not strict:
        return REALS
    return [Piece(N.neg(N.OO), neg_c, True, strict), Piece(c, N.OO, strict, True)]


def _preimage(u_set: list[Piece], a: N.Node, b: N.Node) -> list[Piece]:
    """The set of ``v`` with ``a·v + b`` in ``u_set``."""
    out = []
    flip = _sign(a) < 0

    def back(e: N.Node) -> N.Node:
        if N.is_infinite(e):
            return N.neg(e) if flip else e
        return N.div(N.add(e, N.neg(b)), a)

    for p in u_set:
        lo, hi = back(p.lo), back(p.hi)
        out.append(Piece(hi, lo, p.hi_open, p.lo_open) if flip else Piece(lo, hi, p.lo_open, p.hi_open))
    return _merge(out)


def substitute(node: N.Node, name: str, value: N.Node) -> N.Node:
    """``node`` with the variable ``name`` replaced by ``value``, rebuilt canonically."""
    if isinstance(node, N.Sym):
        return value if node.name == name else node
    if isinstance(node, N.Add):
        return N.add(*(substitute(a, name, value) for a in node.args))
    if isinstance(node, N.Mul):
        return N.mul(*(substitute(a, name, value) for a in node.args))
    if isinstance(node, N.Pow):
        return N.power(substitute(node.base, name, value), substitute(node.exp, name, value))
    if isinstance(node, N.Func):
        return N.Func(node.name, tuple(substitute(a, name, value) for a in node.args))
    if isinstance(node, (N.Num, N.Const)):
        return node
    raise Undecidable(f"cannot substitute into {type(node).__name__}")

