"""Canonical sets of reals and one-variable relations solved into them."""

from envs.math import nodes as N
from envs.math import sets
from envs.math.parser import parse_answer


def canon(text: str) -> list[sets.Piece]:
    return sets.pieces(parse_answer(text), tuple_is_interval=True)


def test_unions_are_merged_and_points_absorbed():
    assert canon("[0, 2] \\cup [2, 5]") == canon("[0, 5]")
    assert canon("(1, 2) \\cup \\{2\\} \\cup (2, 3)") == canon("(1, 3)")
    assert canon("\\{-1\\} \\cup (-1, 3)") == canon("[-1, 3)")
    assert canon("(3, 5) \\cup (1, 4)") == canon("(1, 5)")
    assert len(canon("[0, 2) \\cup (2, 5]")) == 2  # 2 is missing: two pieces
    assert canon("(2, 1)") == []  # empty interval


def test_endpoints_are_ordered_exactly_or_not_at_all():
    assert canon("[1, \\sqrt2] \\cup [\\sqrt2, 2]") == canon("[1, 2]")
    try:
        canon("[0, x] \\cup [1, 2]")
    except sets.Undecidable:
        pass
    else:
        raise AssertionError("a symbolic endpoint has no canonical order")


def solved(text: str) -> N.Node | None:
    rel = parse_answer(text)
    assert isinstance(rel, N.Relation)
    return sets.solve(rel)


def test_linear_relations_are_solved_with_the_direction_flipped_by_a_negative_factor():
    assert solved("-2x > -6") == N.Interval(N.neg(N.OO), N.Num(3), True, True)
    assert solved("-2x < -6") == N.Interval(N.Num(3), N.OO, True, True)
    assert solved("2x + 1 \\ge x - 2") == N.Interval(N.Num(-3), N.OO, False, True)
    assert solved("x + y < 3") is None  # two variables: left to the relation comparison


def test_absolute_values_become_unions():
    one, two = N.Num(1), N.Num(2)
    assert solved("1 \\le |t| \\le 2") == N.Union_((N.Interval(N.Num(-2), N.Num(-1), False, False), N.Interval(one, two, False, False)))
    assert solved("|x - 5| < 2") == N.Interval(N.Num(3), N.Num(7), True, True)
    assert solved("|x| < -1") == N.EmptySet()
    assert solved("|x| \\ge 0") == N.Interval(N.neg(N.OO), N.OO, True, True)
    assert solved("|2x| \\le 0") == N.SetOf((N.ZERO,))
