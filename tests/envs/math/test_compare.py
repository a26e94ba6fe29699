"""The comparison policy, one behaviour per category (the labelled suite in
scripts/data/math_pairs.jsonl measures accuracy; these pin the rules)."""

import pytest

from envs.math import check

EQUAL = [
    # numbers and fractions
    ("0.5", "\\frac12"), ("\\frac{6}{8}", "\\frac34"), ("1,000", "1000"), ("1\\,000", "1000"), ("1 000", "1000"),
    ("-\\frac{1}{2}", "\\frac{-1}{2}"), ("1.5e3", "1500"), ("1.5 \\times 10^3", "1500"), ("0.\\overline{3}", "\\frac13"),
    ("2\\frac{1}{2}", "\\frac52"), ("\\$5.00", "5"),
    # radicals, pi, algebra
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"), ("2\\sqrt{2}", "\\sqrt{8}"), ("2\\pi", "\\pi \\cdot 2"),
    ("(x+1)^2", "x^2+2x+1"), ("\\frac{x}{2}", "0.5x"), ("\\sqrt{3+2\\sqrt2}", "1+\\sqrt2"),
    ("\\sin^2 x + \\cos^2 x", "1"), ("\\log_2 8", "3"), ("e^{i\\pi}", "-1"),
    # complex
    ("2i", "0+2i"), ("\\frac{1+i}{2}", "0.5+0.5i"), ("(1+i)^2", "2i"),
    # units, percent, degrees, text
    ("5\\text{ cm}", "5"), ("50\\%", "50"), ("50\\%", "0.5"), ("30^\\circ", "30"), ("30^\\circ", "\\frac{\\pi}{6}"),
    ("\\text{Monday}", "Monday"), ("(C)", "\\text{(C)}"), ("C", "\\textbf{(C)}"),
    # empty set, infinity
    ("\\varnothing", "\\emptyset"), ("no solution", "\\varnothing"), ("\\{\\}", "\\emptyset"),
    ("\\infty", "\\infty"), ("(-\\infty, 2]", "x \\le 2"),
    # structures
    ("(1, 2)", "(1,2)"), ("\\{2, 1\\}", "\\{1, 2\\}"), ("2, 1", "1, 2"), ("1 \\pm \\sqrt2", "1+\\sqrt2, 1-\\sqrt2"),
    ("(3, \\infty)", "x > 3"), ("1 < x \\le 5", "(1, 5]"), ("x < -1 \\text{ or } x > 2", "(-\\infty,-1)\\cup(2,\\infty)"),
    ("(2, 3) \\cup (-\\infty, 1)", "(-\\infty, 1) \\cup (2, 3)"),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}"),
    ("\\begin{pmatrix}\\frac12\\\\ 2\\end{pmatrix}", "\\begin{pmatrix}0.5\\\\2\\end{pmatrix}"),
    # equations
    ("x = 3", "3"), ("3", "x=3"), ("y = 2x+1", "2x - y + 1 = 0"), ("x = 1, y = 2", "x=1,y=2"), ("x = 2 \\text{ or } x = -2", "\\pm 2"),
    ("2x + 2 > 6", "x + 1 > 3"),
]

DIFFERENT = [
    ("1/2^{99}", "1/2^{98}"), ("0.0010001", "0.001"), ("0.333", "\\frac13"), ("3.14", "\\pi"),
    ("\\frac{\\sqrt{3}}{3}", "\\frac{\\sqrt{3}}{2}"), ("x^2+2x", "(x+1)^2"), ("-2i", "2i"), ("2", "2i"),
    ("(2, 1)", "(1, 2)"), ("[1, 2]", "(1, 2)"), ("[3, \\infty)", "x > 3"), ("\\{1, 2\\}", "\\{1, 2, 3\\}"),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}"),
    ("\\text{Tuesday}", "Monday"), ("(B)", "\\text{(C)}"), ("0", "\\varnothing"), ("-\\infty", "\\infty"),
    ("x = 3", "x = -3"), ("y = 2x+1", "y = 2x - 1"), ("2x + 2 > 6", "x + 1 < 3"), ("5\\%", "50"),
    ("1,000", "1"), ("\\sqrt{x^2}", "x"), ("9^{9^{9^9}}", "1"), ("1e3", "1000.1"),
]


@pytest.mark.parametrize("pred,gold", EQUAL)
def test_equal(pred, gold):
    v = check(f"so \\boxed{{{pred}}}", gold, timeout_s=30)
    assert v.passed, (pred, gold, v.info)


@pytest.mark.parametrize("pred,gold", DIFFERENT)
def test_different(pred, gold):
    v = check(f"so \\boxed{{{pred}}}", gold, timeout_s=30)
    assert not v.passed, (pred, gold, v.info)


def test_numeric_tolerance_is_opt_in():
    assert not check("\\boxed{0.333}", "\\frac13").passed
    assert check("\\boxed{0.333}", "\\frac13", rel_tol=1e-2).passed
    assert not check("\\boxed{0.3}", "\\frac13", rel_tol=1e-2).passed
    assert check("\\boxed{3.1416}", "\\pi", rel_tol=1e-4).passed


def test_fast_path_does_not_need_sympy():
    v = check("347*8=2776\nAnswer: 2776", "2776", symbolic=False)
    assert v.passed and v.info["decided_by"] == ["fast-rational"]
    assert check("\\boxed{\\frac{\\sqrt2}{2}}", "\\frac{1}{\\sqrt2}", symbolic=False).passed


def test_normalised_forms_are_reported():
    v = check("\\boxed{\\dfrac{2}{4}}", "0.5")
    assert v.info["pred"] == "1/2" and v.info["gold"] == "1/2"
