"""Matrix expressions are evaluated into the matrix they equal, in order."""

import pytest

from envs.math import nodes as N
from envs.math.lexer import ParseError
from envs.math.parser import parse_answer

A = "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"
B = "\\begin{pmatrix}0&1\\\\1&0\\end{pmatrix}"


def test_products_keep_their_order_and_sums_add_entries():
    assert parse_answer(A + B) == parse_answer("\\begin{pmatrix}2&1\\\\4&3\\end{pmatrix}")
    assert parse_answer(B + A) == parse_answer("\\begin{pmatrix}3&4\\\\1&2\\end{pmatrix}")
    assert parse_answer(A + " + " + B) == parse_answer("\\begin{pmatrix}1&3\\\\4&4\\end{pmatrix}")
    assert parse_answer(A + " - " + A) == parse_answer("\\begin{pmatrix}0&0\\\\0&0\\end{pmatrix}")
    assert parse_answer("2" + A) == parse_answer(A + " \\cdot 2") == parse_answer("\\begin{pmatrix}2&4\\\\6&8\\end{pmatrix}")
    assert parse_answer(A + "^2") == parse_answer("\\begin{pmatrix}7&10\\\\15&22\\end{pmatrix}")


@pytest.mark.parametrize("bad", [A + " + 1", A + "\\begin{pmatrix}1&2\\end{pmatrix}", "1/" + A, A + "^{100}"])
def test_undefined_matrix_arithmetic_is_refused(bad):
    with pytest.raises(ParseError):
        parse_answer(bad)


def test_symbolic_entries_stay_trees():
    m = parse_answer("x" + A)
    assert isinstance(m, N.Matrix) and m.rows[0][0] == N.Sym("x")
