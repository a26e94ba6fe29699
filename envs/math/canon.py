"""Top-level rewrites that put an answer in canonical form before comparison.

Applied to both sides alike, so a rule never depends on which side is the gold answer:

- ``±``: ``1 ± √2`` is the list of both values;
- chains: ``y = 2+3+4 = 9`` answers ``y = 9`` (the value after the last ``=`` is the final one);
  a chain of constants ``7 + 8 = 15`` answers 15; ``≈`` keeps the exact part (``1/3 ≈ 0.33`` is
  1/3) unless only a label precedes it (``x ≈ 11`` is ``x = 11``);
- assignments: ``x = 3``, ``AB = 4``, ``f(x) = 1``, ``|AB| = 1``, ``A:B = 7:32`` answer their value
  (a *label* is a variable, a product or quotient of variables without a coefficient, or its
  absolute value; ``2x = 6``, ``x^2 = 4`` and ``a + 3z = 0`` are equations, not labels);
  ``(a, b) = (1, 4)`` and ``x = 1, y = 3`` are `Assignments` (named values); ``x = 1 or x = 2``
  is the list of values; ``x=1, y=3; x=2, y=5`` is a list of solutions;
- relations in one variable become their solution set (`envs.math.sets`): ``-2x > -6`` and
  ``x < 3`` both become ``(-\\infty, 3)``, ``1 \\le |t| \\le 2`` becomes ``[-2,-1] \\cup [1,2]``.
"""

from __future__ import annotations

from envs.math import nodes as N
from envs.math import sets


def prepare(pred: N.Node, gold: N.Node) -> tuple[N.Node, N.Node]:
    """Both answers in canonical form. ``x = 3`` answers 3 unless both sides are equations (then
    their sides are compared)."""
    pred, gold = resolve(_pm_set(pred)), resolve(_pm_set(gold))
    unwrap = not (is_relation(pred) and is_relation(gold))
    return canonical(pred, unwrap), canonical(gold, unwrap)


def _pm_set(node: N.Node) -> N.Node:
    """``1 ± √2`` as an answer is the set of both values."""
    alts = N.expand_pm(node)
    if len(alts) == 1:
        return alts[0]
    return N.Answers(tuple(alts))


def is_relation(node: N.Node) -> bool:
    return isinstance(node, N.Relation) or (isinstance(node, N.Answers) and all(isinstance(x, N.Relation) for x in node.items))


# -- chains -----------------------------------------------------------------------------------

def resolve(node: N.Node) -> N.Node:
    """Chains and approximations reduced to the final statement (see module docstring)."""
    if isinstance(node, N.Answers):
        return N.Answers(tuple(resolve(x) for x in node.items))
    if not isinstance(node, N.Relation):
        return node
    ops, terms = node.ops, node.terms
    if "≈" in ops:
        k = ops.index("≈")
        if k == 0:
            return N.Relation(("=",), terms[:2]) if is_label(terms[0]) else terms[0]
        ops, terms = ops[:k], terms[: k + 1]
    if any(op != "=" for op in ops):
        return N.Relation(ops, terms)
    if len(terms) >= 3 and is_label(terms[0]):
        return N.Relation(("=",), (terms[0], terms[-1]))
    if len(terms) >= 2 and not any(N.free_symbols(t) for t in terms):
        return terms[-1]  # 7 + 8 = 15: a worked computation answers its last value
    return N.Relation(ops, terms)


# -- labels and assignments -------------------------------------------------------------------

def is_label(node: N.Node, allow_abs: bool = True) -> bool:
    """A name for a quantity: ``x``, ``AB``, ``f(x)`` (written ``f·x``), ``A/B``, ``|AB|``, ``x_1``.

    ``|AB|`` names a length in an assignment, but in an inequality ``1 \\le |t| \\le 2`` it is a
    function of ``t`` (``allow_abs=False``)."""
    if isinstance(node, N.Sym):
        return True
    if isinstance(node, N.Func) and node.name == "abs" and len(node.args) == 1:
        return allow_abs and is_label(node.args[0])
    if isinstance(node, N.Mul):  # AB, A/B, NO/(BO): symbols over symbols, no coefficient
        return any(isinstance(a, N.Sym) for a in node.args) and all(isinstance(a, N.Sym) or _inverse_of_symbols(a) for a in node.args)
    return False


def _inverse_of_symbols(node: N.Node) -> bool:
    if not (isinstance(node, N.Pow) and node.exp == N.MINUS_ONE):
        return False
    base = node.base
    return isinstance(base, N.Sym) or isinstance(base, N.Mul) and all(isinstance(a, N.Sym) for a in base.args)


def assignment(node: N.Node) -> tuple[str, N.Node] | None:
    """``x = 3`` (or ``3 = x``, ``AB = 4``, ``f(x) = 2x``) as (label, value); None otherwise."""
    if not isinstance(node, N.Relation) or node.ops != ("=",):
        return None
    lhs, rhs = node.terms
    if isinstance(lhs, N.Sym) and lhs.name not in N.free_symbols(rhs):
        return lhs.name, rhs
    if isinstance(rhs, N.Sym) and not N.free_symbols(lhs):
        return rhs.name, lhs
    for label, value in ((lhs, rhs), (rhs, lhs)):
        if is_label(label) and not isinstance(label, N.Sym):
            names = N.free_symbols(label)
            if not N.free_symbols(value) or (label is lhs and not names <= N.free_symbols(value)):
                return N.to_text(label), value
    return None


def tuple_assignment(node: N.Node) -> N.Assignments | None:
    """``(a, b) = (1, 4)`` as named values."""
    if not isinstance(node, N.Relation) or node.ops != ("=",):
        return None
    lhs, rhs = node.terms
    if isinstance(rhs, N.Tuple) and isinstance(lhs, N.Tuple):
        lhs, rhs = (lhs, rhs) if all(is_label(x) for x in lhs.items) else (rhs, lhs)
        if len(lhs.items) == len(rhs.items) and all(is_label(x) for x in lhs.items):
            names = tuple(N.to_text(x) for x in lhs.items)
            if len(set(names)) == len(names):
                return N.Assignments(names, rhs.items)
    return None


def _named(node: N.Node) -> tuple[tuple[str, ...], tuple[N.Node, ...]] | None:
    t = tuple_assignment(node)
    if t is not None:
        return t.names, t.values
    a = assignment(node)
    return ((a[0],), (a[1],)) if a is not None else None


# -- canonical form ---------------------------------------------------------------------------

def canonical(node: N.Node, unwrap: bool = True) -> N.Node:
    """The canonical form of a resolved answer (see module docstring)."""
    if isinstance(node, N.Answers):
        items = node.items
        if any(isinstance(x, N.Answers) for x in items):  # "x=1, y=3; x=2, y=5": solutions
            return N.Answers(tuple(_solution(x) for x in items))
        if unwrap:
            values = _values_of_one_label(items)
            if values is not None:
                return N.Answers(values)
        system = _system(items) or _solutions(items)
        if system is not None:
            return system
        parts = [relation_set(x) for x in items]
        if len(parts) > 1 and all(p is not None for p in parts):
            return N.Union_(tuple(parts))  # type: ignore[arg-type]  # "x < 1 or x > 2"
        return node
    t = tuple_assignment(node)
    if t is not None:
        return t
    if unwrap:
        a = assignment(node)
        if a is not None:
            return a[1]
    solved = relation_set(node)
    return solved if solved is not None else node


def _values_of_one_label(items: tuple[N.Node, ...]) -> tuple[N.Node, ...] | None:
    """``x = 1, x = 2`` and ``x = 1 or 2`` (also ``(x,y) = (5,8) and (8,5)``): the values."""
    first = _named(items[0])
    if first is None:
        return None
    names = first[0]
    out: list[N.Node] = []
    for x in items:
        named = _named(x)
        if named is None:
            if isinstance(x, N.Relation):
                return None
            out.append(x)
        elif named[0] == names:
            out.append(named[1][0] if len(names) == 1 else N.Tuple(named[1]))
        else:
            return None
    return tuple(out) if len(items) > 1 else None


def _system(items: tuple[N.Node, ...]) -> N.Assignments | None:
    """``x = 1, y = 2`` (distinct labels): named values in the order written."""
    names: list[str] = []
    values: list[N.Node] = []
    for x in items:
        named = _named(x)
        if named is None:
            return None
        names.extend(named[0])
        values.extend(named[1])
    if len(set(names)) != len(names):
        return None
    return N.Assignments(tuple(names), tuple(values))


def _solutions(items: tuple[N.Node, ...]) -> N.Answers | None:
    """``x=1, y=3, x=2, y=5`` (the same labels repeated in the same order): two solutions."""
    named = [_named(x) for x in items]
    if any(n is None or len(n[0]) != 1 for n in named):
        return None
    names = [n[0][0] for n in named]  # type: ignore[index]
    width = len(dict.fromkeys(names))
    if width < 2 or len(names) % width or len(names) == width:
        return None
    block = names[:width]
    if len(set(block)) != width or any(names[k: k + width] != block for k in range(0, len(names), width)):
        return None
    return N.Answers(tuple(N.Assignments(tuple(block), tuple(n[1][0] for n in named[k: k + width]))  # type: ignore[index]
                           for k in range(0, len(names), width)))


def _solution(group: N.Node) -> N.Node:
    """One ``;``-separated solution: its assignments, or its values as an ordered tuple."""
    if not isinstance(group, N.Answers):
        return canonical(group)
    system = _system(group.items)
    if system is not None:
        return system
    if not any(isinstance(x, (N.Relation, N.Answers)) for x in group.items):
        return N.Tuple(group.items)
    return canonical(group)


# -- relations as sets ------------------------------------------------------------------------

def relation_set(node: N.Node) -> N.Node | None:
    """The solution set of a relation in one variable (or label), or None."""
    direct = _inequality_set(node)
    if direct is not None:
        return direct
    if isinstance(node, N.Relation):
        return sets.solve(node)
    return None


def _inequality_set(node: N.Node) -> N.Node | None:
    """``x > 3`` → ``(3, ∞)``; ``1 < x \\le 5`` → ``(1, 5]``; ``0 < f(x) < 1`` → ``(0, 1)``: one
    label compared with constants; None otherwise."""
    if not isinstance(node, N.Relation) or not node.ops or any(op not in ("<", "<=", ">", ">=", "!=") for op in node.ops):
        return None
    var_positions = [k for k, t in enumerate(node.terms) if N.free_symbols(t)]
    if len(var_positions) != 1 or not is_label(node.terms[var_positions[0]], allow_abs=False):
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
