"""Matrix expressions in answers, evaluated entry by entry into one `Matrix` tree.

``2\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}``, a product of two matrices or a sum of matrices is
the matrix it equals, so it compares with the gold matrix entry by entry. Entries are answer
trees, combined with the canonical constructors of `envs.math.nodes` (never evaluated as text);
matrix products keep their order (they do not commute, unlike `nodes.mul`). Sizes are bounded
(`MAX_DIM`, `MAX_POWER`) so a hostile answer cannot build a huge tree.
"""

from __future__ import annotations

from envs.math import nodes as N
from envs.math.lexer import ParseError

MAX_DIM = 12
"""Largest number of rows or columns combined arithmetically."""

MAX_POWER = 16
"""Largest integer power of a matrix that is multiplied out."""


def is_matrix(node: N.Node) -> bool:
    return isinstance(node, N.Matrix)


def _check(m: N.Matrix) -> N.Matrix:
    if len(m.rows) > MAX_DIM or len(m.rows[0]) > MAX_DIM:
        raise ParseError(f"matrix larger than {MAX_DIM}x{MAX_DIM} in arithmetic")
    return m


def scale(c: N.Node, m: N.Matrix) -> N.Matrix:
    """``c·M`` for a scalar ``c``."""
    _check(m)
    return N.Matrix(tuple(tuple(N.mul(c, x) for x in row) for row in m.rows))


def add(a: N.Node, b: N.Node) -> N.Matrix:
    """``A + B`` for two matrices of the same shape (a matrix plus a scalar is refused)."""
    if not (is_matrix(a) and is_matrix(b)):
        raise ParseError("a matrix plus a scalar is not defined")
    ra, rb = _check(a).rows, _check(b).rows  # type: ignore[union-attr]
    if len(ra) != len(rb) or len(ra[0]) != len(rb[0]):
        raise ParseError(f"matrices of shapes {len(ra)}x{len(ra[0])} and {len(rb)}x{len(rb[0])} cannot be added")
    return N.Matrix(tuple(tuple(N.add(x, y) for x, y in zip(row_a, row_b)) for row_a, row_b in zip(ra, rb)))


def multiply(a: N.Node, b: N.Node) -> N.Matrix:
    """``A·B`` (matrix product, in this order) or a scalar times a matrix."""
    if not is_matrix(a):
        return scale(a, b)  # type: ignore[arg-type]
    if not is_matrix(b):
        return scale(b, a)
    ra, rb = _check(a).rows, _check(b).rows  # type: ignore[union-attr]
    if len(ra[0]) != len(rb):
        raise ParseError(f"matrices of shapes {len(ra)}x{len(ra[0])} and {len(rb)}x{len(rb[0])} cannot be multiplied")
    cols = list(zip(*rb))
    return N.Matrix(tuple(tuple(N.add(*(N.mul(x, y) for x, y in zip(row, col))) for col in cols) for row in ra))


def power(m: N.Matrix, exp: N.Node) -> N.Matrix:
    """``M^k`` for a small positive integer ``k``."""
    if not (isinstance(exp, N.Num) and exp.value.denominator == 1 and 1 <= exp.value <= MAX_POWER):
        raise ParseError(f"only integer powers 1..{MAX_POWER} of a matrix are evaluated")
    if len(m.rows) != len(m.rows[0]):
        raise ParseError("power of a non-square matrix")
    out = m
    for _ in range(int(exp.value) - 1):
        out = multiply(out, m)
    return out


def identity_multiple(node: N.Node) -> N.Node | None:
    """The scalar ``c`` when ``node`` is ``c·I`` (``I`` the identity matrix, written as the
    symbol ``I``), else None. Only used against a gold matrix, which gives ``I`` its size."""
    if node == N.Sym("I"):
        return N.ONE
    if isinstance(node, N.Mul) and N.Sym("I") in node.args:
        rest = [a for a in node.args if a != N.Sym("I")]
        scalar = N.mul(*rest)
        if "I" not in N.free_symbols(scalar):
            return scalar
    return None


def identity_times(c: N.Node, n: int) -> N.Matrix:
    return N.Matrix(tuple(tuple(c if i == j else N.ZERO for j in range(n)) for i in range(n)))
