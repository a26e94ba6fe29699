"""The comparison policy: is a parsed answer equal to the parsed gold answer?

Order of evidence for two scalars (cheapest first, each step only when the previous did not
decide):

1. identical trees after normalisation (``x+1`` vs ``1+x``, ``\\frac12`` vs ``1/2``);
2. exact arithmetic in pure Python (`envs.math.exact`): rationals, Gaussian rationals, square
   roots of rationals, and rational functions of variables by randomized identity testing;
   products of powers too large or too nested for it (``10^{10^8}``, ``3^{3^{3^3}}``,
   ``\\sqrt{\\sqrt{2}}``) by their canonical prime-power form (`envs.math.powers`);
3. numeric refutation (`envs.math.numeric`): clearly different values at sample points → not equal;
4. the opt-in numeric tolerance ``rel_tol`` (off by default): constants within ``rel_tol`` of the
   gold, relative, count as equal;
5. the symbolic path (`envs.math.symbolic`) in a supervised worker process, under the check's
   deadline; trees too large for it are refused before sympy sees them.

Before comparing, both answers are put in canonical form by `envs.math.canon` (chains,
assignments, one-variable relations solved into sets). Structures: tuples compare in order, sets
and bare answer lists without order or repetition, sets of real numbers (intervals, unions,
finite sets) by their canonical form (`envs.math.sets`: ``[1,2] \\cup [2,3]`` is ``[1,3]``),
unions of finite sets as the set of all elements, named values (``x = 1, y = 3``) by name with
each other and in the order written with a tuple, matrices entry by entry (``c·I`` is ``c``
times the identity of the other matrix's size), equations as assignments (``x = 3`` matches
``3``) or by proportional sides (``y = 2x+1`` matches ``2x - y + 1 = 0``). A percentage ``p%``
matches ``p`` or ``p/100``; an angle ``x°`` matches ``x`` or ``x·π/180``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

from envs.math import canon, exact, matrices, numeric, powers, sets, symbolic
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
        pred, gold = canon.prepare(pred, gold)
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
        if isinstance(a, N.Text) or isinstance(b, N.Text):
            return _text_equal(a, b)
        if isinstance(a, N.Assignments) or isinstance(b, N.Assignments):
            return self._assignments(a, b)
        real_sets = self._real_sets(a, b)
        if real_sets is not None:
            return real_sets
        if isinstance(a, N.EmptySet) or isinstance(b, N.EmptySet):
            return _is_empty(a) and _is_empty(b)
        a, b = _finite_union(a), _finite_union(b)
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

    def _assignments(self, a: N.Node, b: N.Node) -> bool:
        """Named values: by name against the same names, else in the order written."""
        if isinstance(a, N.Assignments) and isinstance(b, N.Assignments):
            if len(a.names) == len(b.names) and set(a.names) == set(b.names):
                by_name = dict(zip(b.names, b.values))
                return all(self.equal(v, by_name[k]) for k, v in zip(a.names, a.values))
            return self._ordered(a.values, b.values)
        named, other = (a, b) if isinstance(a, N.Assignments) else (b, a)
        assert isinstance(named, N.Assignments)
        if isinstance(other, (N.Tuple, N.Answers)):
            return self._ordered(named.values, other.items)
        if len(named.values) == 1:
            return self.equal(named.values[0], other)
        return False

    def _real_sets(self, a: N.Node, b: N.Node) -> bool | None:
        """Equality of two sets of real numbers by canonical form (`envs.math.sets`); None when
        either side is not such a set (or its endpoints cannot be ordered exactly)."""
        kinds = (N.Interval, N.Union_, N.EmptySet, N.Intersect, N.SetDiff)
        if not (isinstance(a, kinds) or isinstance(b, kinds)):
            return None
        try:
            pa, pb = sets.pieces(a, tuple_is_interval=True), sets.pieces(b, tuple_is_interval=True)
        except sets.Undecidable:
            return None
        if len(pa) != len(pb):
            self.methods.append("sets")
            return False
        for x, y in zip(pa, pb):
            if (x.lo_open, x.hi_open) != (y.lo_open, y.hi_open) or (x.lo == x.hi) != (y.lo == y.hi):
                self.methods.append("sets")
                return False
            if not (self.equal(x.lo, y.lo) and self.equal(x.hi, y.hi)):
                return False
        self.methods.append("sets")
        return True

    def _matrix(self, a: N.Node, b: N.Node) -> bool:
        for m, other in ((a, b), (b, a)):
            c = matrices.identity_multiple(other)
            if isinstance(m, N.Matrix) and c is not None and len(m.rows) == len(m.rows[0]):
                other = matrices.identity_times(c, len(m.rows))
                return self._matrix(m, other)
        ra, rb = _matrix_rows(a), _matrix_rows(b)
        if ra is None or rb is None or len(ra) != len(rb) or any(len(x) != len(y) for x, y in zip(ra, rb)):
            return False
        return all(self.equal(x, y) for row_a, row_b in zip(ra, rb) for x, y in zip(row_a, row_b))

    def _relations(self, a: N.Relation, b: N.Relation) -> bool:
        if len(a.ops) != 1 or len(b.ops) != 1:
            return a == b
        oa, ob = a.ops[0], b.ops[0]
        if oa == "=" and ob == "=":
            sa, sb = canon.assignment(a), canon.assignment(b)
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
        if not N.free_symbols(a) and not N.free_symbols(b):
            same = powers.equal(a, b)
            if same is not None and (same or self.rel_tol is None or too_large):
                self.methods.append("powers")
                return same
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


# -- helpers ----------------------------------------------------------------------------------

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


def _finite_union(node: N.Node) -> N.Node:
    """``\\{a\\} \\cup \\{b, c\\}`` is the set ``\\{a, b, c\\}`` (any elements); ``\\{a, b, c\\} \\setminus
    \\{b\\}`` is ``\\{a, c\\}`` when every removed element is written as in the set."""
    if isinstance(node, N.Union_) and all(isinstance(x, (N.SetOf, N.EmptySet)) for x in node.items):
        return N.SetOf(tuple(y for x in node.items if isinstance(x, N.SetOf) for y in x.items))
    if isinstance(node, N.SetDiff):
        a, b = _finite_union(node.a), _finite_union(node.b)
        if isinstance(a, N.SetOf) and isinstance(b, N.SetOf) and all(y in a.items for y in b.items):
            return N.SetOf(tuple(x for x in a.items if x not in b.items))
    return node


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
