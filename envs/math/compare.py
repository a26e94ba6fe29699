"""The comparison policy: is a parsed answer equal to the parsed gold answer?

Order of evidence for two scalars (cheapest first, each step only when the previous did not
decide):

1. identical trees after normalisation (``x+1`` vs ``1+x``, ``\\frac12`` vs ``1/2``);
2. exact arithmetic in pure Python (`envs.math.exact`): rationals, Gaussian rationals, square
   roots of rationals, and rational functions of variables by randomized identity testing;
3. numeric refutation (`envs.math.numeric`): clearly different values at sample points → not equal;
4. the opt-in numeric tolerance ``rel_tol`` (off by default): constants within ``rel_tol`` of the
   gold, relative, count as equal;
5. the symbolic path (`envs.math.symbolic`) in a supervised worker process, under the check's
   deadline; trees too large for it are refused before sympy sees them.

Structures: tuples compare in order, sets and bare answer lists without order or repetition,
intervals by endpoints and openness (an infinite endpoint is always open), unions of intervals
without order, matrices entry by entry, equations as assignments (``x = 3`` matches ``3``) or by
proportional sides (``y = 2x+1`` matches ``2x - y + 1 = 0``), one-variable inequalities as the
interval they define (``x > 3`` matches ``(3, \\infty)``). A percentage ``p%`` matches ``p`` or
``p/100``; an angle ``x°`` matches ``x`` or ``x·π/180``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

from envs.math import exact, numeric, symbolic
from envs.math import nodes as N

MAX_ITEMS = 64
"""Largest set/tuple compared element-wise (bounds the quadratic set matching)."""


@dataclass
class Decision:
    """Outcome of one comparison.

    Attributes:
        equal: True/False, or None when undecided (too large, refused, or out of time).
        method: The evidence that decided it (``identical``, ``exact``, ``numeric-refute``,
            ``sympy-simplify``, ...), for people debugging a reward.
        timed_out: The deadline passed before the symbolic path answered.
    """

    equal: bool | None
    method: str
    timed_out: bool = False


@dataclass
class Comparer:
    """Compares answer trees under one deadline (``time.monotonic()`` seconds).

    Attributes:
        deadline: When the check must be over.
        rel_tol: Opt-in relative numeric tolerance for constants (None: exact only).
        symbolic: Whether the sympy worker may be used (False: fast path only).
        methods: The methods used, in order (for ``Verdict.info``).
    """

    deadline: float
    rel_tol: float | None = None
    symbolic: bool = True
    methods: list[str] = field(default_factory=list)
    timed_out: bool = False
    undecided: bool = False

    # -- entry point --------------------------------------------------------------------------

    def answers(self, pred: N.Node, gold: N.Node) -> bool:
        """Whether the answer ``pred`` equals ``gold`` (the top-level policy)."""
        if pred == gold:
            self.methods.append("identical")
            return True
        # "x = 3" answers 3, unless both sides are equations (then sides are compared)
        unwrap = not (_is_relation(pred) and _is_relation(gold))
        pred, gold = _canon(_pm_set(pred), unwrap), _canon(_pm_set(gold), unwrap)
        if pred == gold:
            self.methods.append("identical")
            return True
        return self.equal(pred, gold, top=True)

    # -- structures ---------------------------------------------------------------------------

    def equal(self, a: N.Node, b: N.Node, top: bool = False) -> bool:
        if a == b:
            return True
        # single answers wrapped in a list or set: {3} vs 3
        if isinstance(a, (N.Answers, N.SetOf)) and len(a.items) == 1 and not isinstance(b, (N.Answers, N.SetOf)):
            return self.equal(a.items[0], b, top)
        if isinstance(b, (N.Answers, N.SetOf)) and len(b.items) == 1 and not isinstance(a, (N.Answers, N.SetOf)):
            return self.equal(a, b.items[0], top)
        if isinstance(a, N.EmptySet) or isinstance(b, N.EmptySet):
            return _is_empty(a) and _is_empty(b)
        if isinstance(a, N.Text) or isinstance(b, N.Text):
            return _text_equal(a, b)
        if isinstance(a, (N.SetOf, N.Answers)) and isinstance(b, (N.SetOf, N.Answers)):
            return self._unordered(a.items, b.items)
        if isinstance(a, N.Tuple) and isinstance(b, N.Tuple):
            return self._ordered(a.items, b.items)
        if isinstance(a, N.Answers) and isinstance(b, N.Tuple) or isinstance(a, N.Tuple) and isinstance(b, N.Answers):
            return self._ordered(a.items, b.items)  # "1, 2" for the ordered pair (1, 2)
        if isinstance(a, (N.Interval, N.Union_, N.Tuple)) and isinstance(b, (N.Interval, N.Union_, N.Tuple)):
            return self._intervals(a, b)
        if isinstance(a, N.Matrix) or isinstance(b, N.Matrix):
            return self._matrix(a, b)
        if isinstance(a, N.Relation) and isinstance(b, N.Relation):
            return self._relations(a, b)
        if isinstance(a, N.Relation) or isinstance(b, N.Relation):
            return False
        if isinstance(a, N.SCALAR_TYPES) and isinstance(b, N.SCALAR_TYPES):
            return self._scalar_top(a, b) if top else self.scalar(a, b)
        return False

    def _ordered(self, xs: tuple[N.Node, ...], ys: tuple[N.Node, ...]) -> bool:
        if len(xs) != len(ys) or len(xs) > MAX_ITEMS:
            return False
        return all(self.equal(x, y) for x, y in zip(xs, ys))

    def _unordered(self, xs: tuple[N.Node, ...], ys: tuple[N.Node, ...]) -> bool:
        """Set equality: every element of each side equals some element of the other."""
        if len(xs) > MAX_ITEMS or len(ys) > MAX_ITEMS:
            return set(xs) == set(ys)
        xs, ys = tuple(dict.fromkeys(xs)), tuple(dict.fromkeys(ys))
        cache: dict[tuple[int, int], bool] = {}

        def eq(i: int, j: int) -> bool:
            if (i, j) not in cache:
                cache[i, j] = xs[i] == ys[j] or self.equal(xs[i], ys[j])
            return cache[i, j]

        return all(any(eq(i, j) for j in range(len(ys))) for i in range(len(xs))) and all(
            any(eq(i, j) for i in range(len(xs))) for j in range(len(ys))
        )

    def _intervals(self, a: N.Node, b: N.Node) -> bool:
        pa, pb = _interval_parts(a), _interval_parts(b)
        if pa is None or pb is None:
            return False
        if len(pa) != len(pb):
            return False
        return self._unordered(tuple(pa), tuple(pb)) if len(pa) > 1 else self._interval_equal(pa[0], pb[0])

    def _interval_equal(self, x: N.Interval, y: N.Interval) -> bool:
        return (
            _open(x.lo, x.left_open) == _open(y.lo, y.left_open)
            and _open(x.hi, x.right_open) == _open(y.hi, y.right_open)
            and self.equal(x.lo, y.lo) and self.equal(x.hi, y.hi)
        )

    def _matrix(self, a: N.Node, b: N.Node) -> bool:
        ra, rb = _matrix_rows(a), _matrix_rows(b)
        if ra is None or rb is None or len(ra) != len(rb) or any(len(x) != len(y) for x, y in zip(ra, rb)):
            return False
        return all(self.equal(x, y) for row_a, row_b in zip(ra, rb) for x, y in zip(row_a, row_b))

    def _relations(self, a: N.Relation, b: N.Relation) -> bool:
        if len(a.ops) != 1 or len(b.ops) != 1:
            return a == b
        oa, ob = a.ops[0], b.ops[0]
        if oa == "=" and ob == "=":
            sa, sb = _assignment(a), _assignment(b)
            if sa and sb and sa[0] == sb[0]:
                return self.equal(sa[1], sb[1])
            return self._proportional(N.add(a.terms[0], N.neg(a.terms[1])), N.add(b.terms[0], N.neg(b.terms[1])), positive=False)
        da, ka = _oriented(a)
        db, kb = _oriented(b)
        if ka != kb or da is None or db is None:
            return False
        return self._proportional(da, db, positive=ka != "!=")

    def _proportional(self, a: N.Node, b: N.Node, positive: bool) -> bool:
        try:
            result = _exact_proportional(a, b, positive)
        except exact.NotExact:
            result = None
        if result is not None:
            self.methods.append("exact-ratio")
            return result
        return bool(self._symbolic("proportional", a, b, positive=positive))

    # -- scalars ------------------------------------------------------------------------------

    def _scalar_top(self, a: N.Node, b: N.Node) -> bool:
        """Top-level scalars: percentages and degrees may be written with or without the unit."""
        for wrapper, factor in ((N.Percent, N.Num(Fraction(1, 100))), (N.Degrees, N.div(N.PI, N.Num(Fraction(180))))):
            if isinstance(a, wrapper) and isinstance(b, wrapper):
                return self.scalar(a.x, b.x)
            if isinstance(a, wrapper):
                return self.scalar(a.x, b) or self.scalar(N.mul(a.x, factor), b)
            if isinstance(b, wrapper):
                return self.scalar(a, b.x) or self.scalar(a, N.mul(b.x, factor))
        return self.scalar(a, b)

    def scalar(self, a: N.Node, b: N.Node) -> bool:
        """Equality of two scalar trees (see module docstring for the order of evidence)."""
        if a == b:
            self.methods.append("identical")
            return True
        if _has_infinity(a) or _has_infinity(b):
            self.methods.append("infinity-structural")
            return False
        too_large = False
        try:
            result = exact.identical(a, b)
        except exact.TooLarge:
            result, too_large = None, True
        except exact.NotExact:
            result = None
        if result is not None:
            if not result and self.rel_tol is not None and numeric.within_tolerance(a, b, self.rel_tol):
                self.methods.append("numeric-tolerance")
                return True
            self.methods.append("exact")
            return result
        if not too_large and numeric.refute(a, b):
            if self.rel_tol is not None and numeric.within_tolerance(a, b, self.rel_tol):
                self.methods.append("numeric-tolerance")
                return True
            self.methods.append("numeric-refute")
            return False
        if self.rel_tol is not None and numeric.within_tolerance(a, b, self.rel_tol):
            self.methods.append("numeric-tolerance")
            return True
        if too_large:
            self.methods.append("too-large")
            self.undecided = True
            return False
        return bool(self._symbolic("equal", a, b))

    def _symbolic(self, op: str, a: N.Node, b: N.Node, **extra: object) -> bool | None:
        if not self.symbolic:
            self.methods.append("symbolic-disabled")
            self.undecided = True
            return None
        try:
            symbolic.guard(a)
            symbolic.guard(b)
            request = {"op": op, "a": symbolic.encode(a), "b": symbolic.encode(b), **extra}
        except symbolic.Refused as e:
            self.methods.append(f"refused: {e}")
            self.undecided = True
            return None
        if time.monotonic() >= self.deadline:
            self.timed_out = True
            self.methods.append("timeout")
            return None
        from envs.math.worker import get_pool

        response = get_pool().call(request, self.deadline)
        if response is None:
            self.timed_out = True
            self.methods.append("timeout")
            return None
        self.methods.append(str(response.get("method")))
        if response.get("result") is None:
            self.undecided = True
        return response.get("result")


# -- normalisation helpers --------------------------------------------------------------------

def _pm_set(node: N.Node) -> N.Node:
    """``1 ± √2`` as an answer is the set of both values."""
    alts = N.expand_pm(node)
    if len(alts) == 1:
        return alts[0]
    return N.Answers(tuple(alts))


def _assignment(node: N.Node) -> tuple[str, N.Node] | None:
    """``x = 3`` (or ``3 = x``) as (variable, value); None for other relations."""
    if not isinstance(node, N.Relation) or node.ops != ("=",):
        return None
    lhs, rhs = node.terms
    if isinstance(lhs, N.Sym) and lhs.name not in N.free_symbols(rhs):
        return lhs.name, rhs
    if isinstance(rhs, N.Sym) and not N.free_symbols(lhs):
        return rhs.name, lhs
    return None


def _is_relation(node: N.Node) -> bool:
    return isinstance(node, N.Relation) or (isinstance(node, N.Answers) and all(isinstance(x, N.Relation) for x in node.items))


def _canon(node: N.Node, unwrap: bool = True) -> N.Node:
    """Top-level rewrites: assignments become values, one-variable inequalities intervals."""
    if isinstance(node, N.Answers) and unwrap:
        items = list(node.items)
        assigns = [_assignment(x) for x in items]
        if assigns[0] is not None:
            var = assigns[0][0]
            # "x = 1, x = 2" and "x = 1 or 2": several values of one variable
            if all(a is None and not isinstance(x, N.Relation) or (a is not None and a[0] == var) for a, x in zip(assigns, items)):
                return N.Answers(tuple(a[1] if a else x for a, x in zip(assigns, items)))
            if all(a is not None for a in assigns) and len({a[0] for a in assigns}) == len(assigns):  # type: ignore[index]
                # a system "x = 1, y = 2": the tuple of values in variable order
                return N.Tuple(tuple(v for _, v in sorted(assigns)))  # type: ignore[arg-type]
        sets = [_inequality_set(x) for x in items]
        if all(s is not None for s in sets) and len(sets) > 1:
            return N.Union_(tuple(p for s in sets for p in (_interval_parts(s) or [])))  # type: ignore[arg-type]
        return node
    assign = _assignment(node) if unwrap else None
    if assign is not None:
        return assign[1]
    ineq = _inequality_set(node)
    if ineq is not None:
        return ineq
    return node


def _inequality_set(node: N.Node) -> N.Node | None:
    """``x > 3`` → ``(3, ∞)``; ``1 < x \\le 5`` → ``(1, 5]``; None when not one variable vs constants."""
    if not isinstance(node, N.Relation) or not node.ops or any(op not in ("<", "<=", ">", ">=", "!=") for op in node.ops):
        return None
    var_positions = [k for k, t in enumerate(node.terms) if isinstance(t, N.Sym)]
    if len(var_positions) != 1 or any(N.free_symbols(t) for k, t in enumerate(node.terms) if k != var_positions[0]):
        return None
    k = var_positions[0]
    lo: N.Node = N.neg(N.OO)
    hi: N.Node = N.OO
    lo_open = hi_open = True
    if node.ops == ("!=",):
        other = node.terms[1 - k]
        return N.Union_((N.Interval(lo, other, True, True), N.Interval(other, hi, True, True)))
    if "!=" in node.ops:
        return None
    for j, op in enumerate(node.ops):
        left, right = node.terms[j], node.terms[j + 1]
        if j + 1 == k:  # bound on the left of the variable: left op x
            if op in ("<", "<="):
                lo, lo_open = left, op == "<"
            else:
                hi, hi_open = left, op == ">"
        elif j == k:  # x op right
            if op in ("<", "<="):
                hi, hi_open = right, op == "<"
            else:
                lo, lo_open = right, op == ">"
        else:
            return None
    return N.Interval(lo, hi, lo_open, hi_open)


def _oriented(rel: N.Relation) -> tuple[N.Node | None, str]:
    """``a < b`` → (``b - a``, ``<``) so that the relation says "value > 0" (or ``>=``)."""
    op = rel.ops[0]
    lhs, rhs = rel.terms
    if op in ("<", "<="):
        return N.add(rhs, N.neg(lhs)), "<" if op == "<" else "<="
    if op in (">", ">="):
        return N.add(lhs, N.neg(rhs)), "<" if op == ">" else "<="
    if op == "!=":
        return N.add(lhs, N.neg(rhs)), "!="
    return None, op


def _exact_proportional(a: N.Node, b: N.Node, positive: bool) -> bool | None:
    """Exact test that ``a = c·b`` for a constant ``c`` (positive if asked) at random points."""
    names = exact.formal_names(a, b)
    if any(n in ("pi", "e") for n in names):
        return None
    import random

    rng = random.Random("ratio|" + "|".join(names))
    ratio = None
    agreed = 0
    for _ in range(12):
        env = {n: exact.Alg.rational(Fraction(rng.randrange(1 << 20, 1 << 31), rng.randrange(1, 1 << 10))) for n in names}
        try:
            va, vb = exact.evaluate(a, env), exact.evaluate(b, env)
        except exact.Undefined:
            continue
        if vb.is_zero() or va.is_zero():
            if va.is_zero() != vb.is_zero():
                return False
            continue
        r = va / vb
        if ratio is None:
            ratio = r
            q = r.as_rational()
            if positive and (q is None or q <= 0):
                return False if q is not None else None
        elif r != ratio:
            return False
        agreed += 1
        if agreed == 3:
            return True
    return None


def _interval_parts(node: N.Node) -> list[N.Interval] | None:
    if isinstance(node, N.Interval):
        return [node]
    if isinstance(node, N.Tuple) and len(node.items) == 2:
        return [N.Interval(node.items[0], node.items[1], True, True)]  # (a, b) read as an open interval
    if isinstance(node, N.Union_):
        parts: list[N.Interval] = []
        for item in node.items:
            sub = _interval_parts(item)
            if sub is None:
                return None
            parts.extend(sub)
        return parts
    return None


def _open(endpoint: N.Node, is_open: bool) -> bool:
    return True if N.is_infinite(endpoint) else is_open


def _matrix_rows(node: N.Node) -> list[tuple[N.Node, ...]] | None:
    if isinstance(node, N.Matrix):
        rows = [tuple(r) for r in node.rows]
        if len(rows) > 1 and all(len(r) == 1 for r in rows):  # a column vector is a tuple
            return [tuple(r[0] for r in rows)]
        return rows
    if isinstance(node, N.Tuple):
        return [node.items]
    return None


def _is_empty(node: N.Node) -> bool:
    return isinstance(node, N.EmptySet) or (isinstance(node, (N.SetOf, N.Answers)) and not node.items)


def _has_infinity(node: N.Node) -> bool:
    return any(n == N.OO for n in N.walk(node))


def _text_equal(a: N.Node, b: N.Node) -> bool:
    ta, tb = _as_text(a), _as_text(b)
    return ta is not None and ta == tb


def _as_text(node: N.Node) -> str | None:
    if isinstance(node, N.Text):
        return node.value
    if isinstance(node, N.Sym) and len(node.name) == 1:
        return node.name.lower()  # multiple-choice letter written bare: C
    if isinstance(node, N.Const) and node.name in ("e", "i"):
        return node.name
    return None
