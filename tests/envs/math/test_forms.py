"""`envs.math.forms`: what counts as a numeric literal, and what restates a question."""

import pytest

from envs.math.forms import Question, is_numeric_literal, question_expressions

LITERALS = [
    "544", "-5", "+5", "−7", "18.00", "1,000", "1\\,000", "1 000 000", "1.5e3", "0.\\overline{3}", "(544)",
    "3/4", "\\frac{3}{4}", "\\dfrac{3}{4}", "-\\frac{3}{4}", "\\frac{-3}{4}", "\\frac34", "2\\frac{1}{2}", "16\\frac23\\%", "3:4",
    "1.5 \\times 10^{3}", "10^{-3}", "10⁻³", "25\\%", "45^\\circ",
    "\\$544", "$18.50", "5 apples", "544\\text{ dollars}", "18 \\text{ cm}^2", "18 cm^2", "20 km/h", "2.5 hours", "\\mathbf{6}",
    "x = 5", "x = \\frac13", "|AB| = 1", "f(2) = 5", "68*8 = 544", "11 \\approx 11",
]
OPERATIONS = [
    "68*8", "68 \\cdot 8", "68 \\times 8", "68 × 8", "68 times 8", "68 x 8", "(16-3-4)*2", "16 - 3 - 4", "98*1.", "5 - 0", "-(-5)",
    "544/8", "\\frac{10}{2}", "\\frac{544}{8}", "6/4", "6:3", "\\frac44", "2^{10}", "10^3", "2^{-3}", "15 \\times 10^{2}", "0.5 \\times 10^2",
    "3!", "\\sqrt{4}", "sqrt(4)", "\\binom{8}{4}", "2\\pi", "3I", "5x", "12 \\times 4 \\div 3",
    "x = -5, p = 14/3", "1, 2", "2x - y + 1 = 0", "x < 5", "5 = 68*8", "", "The sum is 5 and 6",
]


@pytest.mark.parametrize("text", LITERALS)
def test_a_number_written_out_is_a_literal(text):
    assert is_numeric_literal(text)


@pytest.mark.parametrize("text", OPERATIONS)
def test_an_operation_left_undone_is_not_a_literal(text):
    assert not is_numeric_literal(text)


def test_unreduced_fractions_are_numbers_but_not_answers():
    assert not is_numeric_literal("6/4") and is_numeric_literal("6/4", lowest_terms=False)  # a gold may be written so


def test_a_question_restates_its_expressions_in_any_spelling_and_order():
    q = Question.of("Compute 68*8.\n")
    for echo in ["68*8", "68 * 8", "68 \\cdot 8", "68 \\times 8", "(68*8)", "8*68", "8 \\times 68", "68*8 = ?"]:
        assert q.restates(echo), echo
    for answer in ["544", "68", "8", "68*8 = 544", "544 = 544", "68*9"]:
        assert not q.restates(answer), answer


def test_restatements_of_math_questions():
    q = Question.of("Simplify $\\sqrt{8}$. Then find $x$ if $x = 68 \\cdot 8 = ?$ and compute $(x + 1 - x)! \\div (x-x + 1)!$.")
    assert q.restates("\\sqrt{8}") and q.restates("68*8") and q.restates("(x+1-x)")  # a part of an expression too
    assert not q.restates("2\\sqrt{2}") and not q.restates("x") and not q.restates("1")
    assert Question.of("Convert $1230_{4}$ to base 10.").restates("1230_{4}")  # a conversion left undone
    assert Question.of("Calculate (16 - 3 - 4) * 2.").restates("2*(16-3-4)")
    assert not Question.of(None).restates("68*8") and not Question.of("").restates("68*8")


def test_a_question_mentions_its_numbers():
    q = Question.of("The sum of 47 and 38, then 1,250.5 more?")
    assert q.mentions("47") and q.mentions("38") and q.mentions("1,250.5") and not q.mentions("85") and not q.mentions("47+38")


def test_dollar_signs_around_prose_are_not_math():
    text = "He sells them for $3 each. He has 25 ears of corn that he can sell as well. If he earns $75, how many?"
    assert question_expressions(text) == []
    assert question_expressions("Compute $2^{10}$ and 3 + 4, then $\\frac{1}{2}$.") == ["2^{10}", "\\frac{1}{2}", "3 + 4"]
