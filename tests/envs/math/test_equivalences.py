"""The equivalence rules added for answers as models write them, each with near-misses that must
stay wrong. Every pair is (gold, boxed response, expected verdict); checks run through `check`,
so extraction, parsing, canonical forms and comparison are exercised together."""

import pytest

from envs.math import check

CASES = [
    # chains: the value after the last "=" is the answer; an intermediate value is not
    ("9", "y = 2 + 3 + 4 = 9", True), ("9", "y = 9 = 2 + 3 + 5", False), ("11", "x = 5 + 5 + 1 = 7 = 11", True),
    ("x = 11", "x = 5 + 5 + 1 = 7 = 11", True), ("7", "x = 5 + 5 + 1 = 7 = 11", False), ("15", "7 + 8 = 15", True),
    ("15", "7 + 8 = 16", False), ("z = 2", "z = 3 + 3 = 2", True),
    # approximations keep their exact part (or the value of a lone label)
    ("\\frac13", "\\frac13 \\approx 0.33", True), ("0.33", "\\frac13 \\approx 0.33", False), ("11", "x \\approx 11", True),
    ("x = \\frac13", "x = 5 + 1 = \\frac13 \\approx 0.3", True),
    # relations normalised on both sides: solved for the variable
    ("x < 1", "2x < 2", True), ("x < 1", "-x > -1", True), ("x < 1", "x > -1", False), ("x < 3", "-2x > -6", True),
    ("x < 3", "-2x < -6", False), ("x \\le 1", "-x \\ge -1", True), ("x \\ge 5", "5 \\le x", True), ("x \\ge 5", "x \\le 5", False),
    ("x > -3", "2x + 1 > x - 2", True), ("(-\\infty, 5]", "2x - 10 \\le 0", True), ("(-\\infty, 5]", "2x - 10 < 0", False),
    ("1 \\le |t| \\le 2", "t \\in [-2,-1]\\cup[1,2]", True), ("1 \\le |t| \\le 2", "t \\in [-2,-1]\\cup[1,3]", False),
    ("1 \\le |t| \\le 2", "[1, 2]", False), ("[3, 7]", "|x - 5| \\le 2", True), ("[3, 7]", "|x - 5| < 2", False),
    ("(-\\infty,-1)\\cup(1,\\infty)", "|y| > 1", True), ("(-\\infty,-1)\\cup(1,\\infty)", "|y| \\ge 1", False),
    ("0 < f(x) < 1", "(0, 1)", True), ("-793 < a < 10", "(-793, 10)", True),
    # \neq, != and ≠ are the relation, never a factorial
    ("x \\neq 3", "x != 3", True), ("x != 3", "(-\\infty, 3) \\cup (3, \\infty)", True), ("x = 3", "x != 3", False),
    ("3", "x != 3", False), ("6", "3!", True), ("x \\ne 2", "x ≠ 2", True),
    # set algebra: unions merged, points absorbed, a missing element stays wrong
    ("\\{a, b, c\\}", "\\{a\\} \\cup \\{b, c\\}", True), ("\\{a, b, c\\}", "\\{a\\} \\cup \\{c\\}", False),
    ("[0, 5]", "[0, 2] \\cup [2, 5]", True), ("[0, 5]", "[0, 2) \\cup (2, 5]", False), ("[-1, 3)", "\\{-1\\} \\cup (-1, 3)", True),
    ("(1, 5)", "(1, 3) \\cup (2, 5)", True), ("(1, 5)", "(1, 2) \\cup (3, 5)", False), ("\\{-1\\} \\cup [0, 7)", "[0, 7) \\cup \\{-1\\}", True),
    ("(-\\infty, \\infty)", "(-\\infty, 0] \\cup (0, \\infty)", True), ("(-2, 2)", "(-2, 0) \\cup (0, 2)", False),
    # tuples and assignments: by name, by written order against a tuple
    ("(1, 4)", "(a, b) = (1, 4)", True), ("(a, b) = (1, 4)", "(4, 1)", False), ("(3, 2)", "p = 3, q = 2", True),
    ("(3, 2)", "p = 2, q = 3", False), ("(p, q) = (3, 2)", "q = 2, p = 3", True), ("(p, q) = (3, 2)", "q = 3, p = 2", False),
    ("(1, 3), (2, 5)", "x = 1, y = 3; x = 2, y = 5", True), ("(1, 3), (2, 5)", "x = 1, y = 3; x = 2, y = 4", False),
    ("x = -5,\\ p = \\frac{14}{3}", "-5, \\frac{14}{3}", True), ("x = -5,\\ p = \\frac{14}{3}", "\\frac{14}{3}, -5", False),
    ("(5, 8), (8, 5)", "(x, y) = (5, 8) \\text{ and } (8, 5)", True), ("-12; -11; -10", "\\{-12, -11, -10\\}", True),
    ("(0;0;6),(4;-2;0)", "(4, -2, 0), (0, 0, 6)", True), ("(0;0;6),(4;-2;0)", "(4, -2, 0), (0, 0, 7)", False),
    # labels: a name for a quantity is not an equation to solve
    ("AB = 4, CD = 5", "4, 5", True), ("AB = 4, CD = 5", "5, 4", False), ("|AB| = 1", "1", True), ("A:B = 7:32", "\\frac{7}{32}", True),
    ("\\frac{NO}{BO} = \\frac{1}{\\sqrt6}", "\\frac{\\sqrt6}{6}", True), ("f(x) = 1", "1", True), ("k = 1", "1", True),
    ("a + 3z = 0", "0", False), ("2x + z = 1", "1", False), ("a^2 + b = 0", "0", False), ("7 = 11a + c", "11a + c", False),
    ("x^2 = 4", "4", False), ("2x = 6", "6", False),
    # matrix expressions are evaluated; products keep their order
    ("\\begin{pmatrix}3&0\\\\0&3\\end{pmatrix}", "3I", True), ("\\begin{pmatrix}3&0\\\\0&3\\end{pmatrix}", "2I", False),
    ("\\begin{pmatrix}6&8\\\\10&12\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}+\\begin{pmatrix}5&6\\\\7&8\\end{pmatrix}", True),
    ("\\begin{pmatrix}2&1\\\\4&3\\end{pmatrix}", "\\begin{pmatrix}1&0\\\\1&1\\end{pmatrix}\\begin{pmatrix}2&1\\\\2&2\\end{pmatrix}", True),
    ("\\begin{pmatrix}2&1\\\\4&3\\end{pmatrix}", "\\begin{pmatrix}2&1\\\\2&2\\end{pmatrix}\\begin{pmatrix}1&0\\\\1&1\\end{pmatrix}", False),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\frac12\\begin{pmatrix}2&4\\\\6&8\\end{pmatrix}", True),
    ("\\begin{pmatrix}1&3\\\\0&1\\end{pmatrix}", "\\begin{pmatrix}1&1\\\\0&1\\end{pmatrix}^3", True),
    ("\\begin{pmatrix}-1&0\\\\0&-1\\end{pmatrix}", "-\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", True),
    # words for symbols
    ("\\infty", "\\text{infinite}", True), ("\\infty", "\\text{infinitely many}", True), ("0", "\\text{infinite}", False),
    ("\\text{undefined}", "\\text{does not exist}", True), ("\\text{undefined}", "DNE", True), ("\\text{undefined}", "0", False),
    ("\\text{none}", "\\varnothing", True), ("\\text{none}", "\\text{undefined}", False),
    # percent words and repeating decimals with percent
    ("45\\%", "45 \\text{ percent}", True), ("45\\%", "45 pct", True), ("45\\%", "45 percentage", True), ("45\\%", "54 percent", False),
    ("16\\frac23\\%", "16.\\overline{6}\\%", True), ("16\\frac23\\%", "16.6\\%", False), ("12\\frac12\\%", "12.5\\%", True),
    # units and nouns after a number; a conversion that changes the number stays wrong
    ("15", "15 \\text{ marbles}", True), ("15", "15 red marbles", True), ("2", "2000 \\text{ m}", False), ("2", "2 \\text{ km}", True),
    ("1000.99", "1,000.99m²", True), ("25", "25 m²", True),
    # LaTeX thin-space thousands, Unicode math
    ("4096000", "4,\\!096,\\!000", True), ("32349", "32,\\! 349", True), ("32349", "32, 349", False), ("65536", "65{,}536", True),
    ("x^2 - 4", "x² − 4", True), ("x^2 - 4", "x³ − 4", False), ("3\\sqrt2", "3√2", True), ("16", "12 × 4 ÷ 3", True),
    ("2\\pi", "2π", True), ("(-\\infty, 7]", "x ≤ 7", True), ("(-\\infty, 7]", "x ≥ 7", False), ("\\frac52", "2½", True),
]


@pytest.mark.parametrize("gold,answer,expected", CASES)
def test_equivalence_rule(gold, answer, expected):
    v = check(f"The answer is $\\boxed{{{answer}}}$.", gold, timeout_s=5)
    assert v.passed == expected, v.info
    assert check(f"\\boxed{{{gold}}}", gold, timeout_s=5).passed  # every gold answers itself


@pytest.mark.parametrize("gold,answer", [c[:2] for c in CASES if c[2]])
def test_equivalences_hold_with_gold_and_answer_swapped(gold, answer):
    """Canonical forms are applied to both sides, so no rule depends on which side is the gold."""
    assert check(f"\\boxed{{{gold}}}", answer, timeout_s=5).passed


def test_boxes_joined_by_prose_are_one_answer_and_corrections_are_not():
    assert check("\\boxed{(2,2)} \\quad \\text{and} \\quad \\boxed{(6,2)}", "(2, 2), (6, 2)").passed
    assert check("so \\(\\boxed{1}\\) and \\(\\boxed{-2}\\).", "-2, 1").passed
    assert check("\\boxed{a=3} and \\boxed{b=7}", "a = 3, b = 7").passed
    assert check("$$\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}$$", "(3, 3), (1, 1)").passed
    assert check("So $p = \\boxed{7}$ and $q = \\boxed{11}$.", "p = 7, q = 11").passed
    assert not check("So $p = \\boxed{7}$ and $q = \\boxed{11}$.", "p = 11, q = 7").passed
    assert check("\\boxed{1} no no no no no \\boxed{2}", "2").passed  # not joined: the last box answers
    assert not check("\\boxed{24}, no wait, \\boxed{36}", "24, 36").passed
    assert not check("\\boxed{8}. Actually, \\boxed{9}", "8, 9").passed
    assert not check("\\boxed{35} ++++++ \\boxed{4}", "35, 4").passed


def test_doubled_backslashes_are_unescaped_only_when_the_whole_text_is_escaped():
    assert check("so \\\\boxed{\\\\frac{3}{8}}.\\n", "\\frac38").passed
    assert check("\\\\boxed{\\\\left(\\\\frac{1}{5},\\\\frac{1}{6}\\\\right)}", "\\\\left(\\\\frac{1}{5},\\\\frac{1}{6}\\\\right)").passed
    assert not check("so \\\\boxed{\\\\frac{3}{7}}", "\\frac38").passed
    matrix = "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}"  # a real row break is not an escape
    assert check(matrix, "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}").passed


@pytest.mark.parametrize("gold,answer,expected", [
    ("(2, \\infty)", "\\{x \\mid x > 2\\}", True), ("(2, \\infty)", "\\{x \\in \\mathbb{R} : x > 2\\}", True),
    ("(2, \\infty)", "\\{x \\mid x \\ge 2\\}", False), ("(1, 5)", "\\{x \\mid x > 1, x < 5\\}", True),
    ("(-\\infty, 2) \\cup (3, \\infty)", "(-\\infty, 2) U (3, \\infty)", True),
    ("(-\\infty, 2) \\cup (2, \\infty)", "\\mathbb{R} \\setminus \\{2\\}", True), ("(-\\infty, 2) \\cup (2, \\infty)", "\\mathbb{R} \\setminus \\{3\\}", False),
    ("(-\\infty, 2) \\cup (2, \\infty)", "\\text{all real numbers except } 2", True),
    ("[1, 3]", "[0, 3] \\cap [1, 5]", True), ("[1, 3]", "[0, 3] \\cap (1, 5]", False),
    ("\\{1, 3\\}", "\\{1, 2, 3\\} \\setminus \\{2\\}", True), ("\\{a, c\\}", "\\{a, b, c\\} \\setminus \\{b\\}", True),
    ("\\{a, b\\}", "\\{a, b, c\\} \\setminus \\{b\\}", False), ("(-\\infty, \\infty)", "x ∈ ℝ", True),
])
def test_set_builder_and_set_operations(gold, answer, expected):
    assert check(f"\\boxed{{{answer}}}", gold).passed == expected


@pytest.mark.parametrize("response,gold", [
    ("\\boxed{\\therefore x = 5}", "5"), ("So the answer is 42 😊", "42"), ("Answer: 25°C", "25"), ("Answer: 10⁻³", "0.001"),
    ("Answer: ∛8", "2"), ("\\boxed{2**2**2}", "16"),
])
def test_decorations_and_plain_text_notations(response, gold):
    assert check(response, gold).passed


@pytest.mark.parametrize("gold,answer,expected", [
    ("20", "20 km/h", True), ("20", "20/h", False), ("9.8", "9.8\\,\\mathrm{m/s^2}", True), ("100", "100\\ \\text{cm}^3", True),
    ("(1,3),(2,5)", "x=1, y=3 \\text{ or } x=2, y=5", True), ("(1,3),(2,5)", "x=1, y=3, x=2, y=5", True),
    ("(1,3),(2,5)", "x=1, y=3, x=2, y=6", False), ("(1,3),(2,5)", "x=1, y=3, y=5, x=2", False),
])
def test_compound_units_and_repeated_assignment_blocks(gold, answer, expected):
    assert check(f"\\boxed{{{answer}}}", gold).passed == expected
