import json
import os
from fractions import Fraction

import pytest

from envs.math import nodes as N
from envs.math.lexer import ParseError
from envs.math.parser import parse_answer

DATA = os.environ.get("RLVR_DATA_DIR", "")


def num(x) -> N.Num:
    return N.Num(Fraction(x))


@pytest.mark.parametrize("text,value", [
    ("42", 42), ("-3", -3), ("1,000", 1000), ("1\\,000", 1000), ("1{,}000", 1000), ("1 000 000", 1000000),
    ("\\frac{1}{2}", Fraction(1, 2)), ("\\dfrac12", Fraction(1, 2)), ("\\tfrac{3}{4}", Fraction(3, 4)),
    ("2\\frac{1}{2}", Fraction(5, 2)), ("0.\\overline{3}", Fraction(1, 3)), ("0.1\\overline{6}", Fraction(1, 6)),
    ("0.1(6)", Fraction(1, 6)), ("0.333...", Fraction(1, 3)), ("0.142857142857\\ldots", Fraction(1, 7)),
    ("1.5e3", 1500), ("2.5E-2", Fraction(1, 40)), ("\\$12.50", Fraction(25, 2)), ("12 dollars", 12),
    ("5\\text{ cm}^2", 5), ("575\\text{ students}", 575), ("1011_2", 11), ("3:1", 3), ("42.", 42),
])
def test_numbers(text, value):
    assert parse_answer(text) == num(value)


def test_thousands_separators_are_never_products_or_lists_at_top_level():
    assert parse_answer("1 000") == num(1000)
    assert parse_answer("(1,000)") != num(1000)  # inside brackets a comma separates items


def test_structures():
    assert parse_answer("(1, 2)") == N.Tuple((num(1), num(2)))
    assert parse_answer("\\left( \\frac{1}{2}, 3 \\right)") == N.Tuple((num(Fraction(1, 2)), num(3)))
    assert parse_answer("[1, 2)") == N.Interval(num(1), num(2), False, True)
    assert parse_answer("(-\\infty, 3]") == N.Interval(N.neg(N.OO), num(3), True, False)
    assert parse_answer("\\{1, 2\\}") == N.SetOf((num(1), num(2)))
    assert parse_answer("1, 2") == N.Answers((num(1), num(2)))
    assert parse_answer("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}") == N.Matrix(((num(1), num(2)), (num(3), num(4))))
    assert isinstance(parse_answer("[1,2) \\cup (3, \\infty)"), N.Union_)
    assert parse_answer("\\langle 1, 2 \\rangle") == N.Tuple((num(1), num(2)))


def test_relations_and_words():
    assert parse_answer("x = 3") == N.Relation(("=",), (N.Sym("x"), num(3)))
    assert parse_answer("1 < x \\le 5") == N.Relation(("<", "<="), (num(1), N.Sym("x"), num(5)))
    assert parse_answer("x \\in [2, 5]") == N.Interval(num(2), num(5), False, False)
    assert parse_answer("\\text{Monday}") == N.Text("monday")
    assert parse_answer("\\text{(C)}") == N.Text("c")
    for empty in ("\\varnothing", "\\emptyset", "\\{\\}", "no solution", "No real solutions", "none"):
        assert parse_answer(empty) == N.EmptySet()
    assert parse_answer("\\mathbb{R}") == N.Interval(N.neg(N.OO), N.OO, True, True)


def test_units_percent_degrees_and_constants():
    assert parse_answer("50\\%") == N.Percent(num(50))
    assert parse_answer("30^\\circ") == N.Degrees(num(30))
    assert parse_answer("30^{\\circ}") == N.Degrees(num(30))
    assert parse_answer("30°") == N.Degrees(num(30))
    assert parse_answer("2i") == N.mul(num(2), N.I)
    assert parse_answer("\\mathrm{i}") == N.I
    assert parse_answer("e^{i\\pi}") == N.Pow(N.E, N.mul(N.I, N.PI))
    assert parse_answer("\\infty") == N.OO


def test_implicit_multiplication_and_functions():
    x = N.Sym("x")
    assert parse_answer("2x") == N.mul(num(2), x)
    assert parse_answer("x+1") == parse_answer("1 + x")
    assert parse_answer("\\sqrt{2}/2") == parse_answer("\\frac{\\sqrt2}{2}")
    assert parse_answer("\\sin^2 x") == N.Pow(N.Func("sin", (x,)), num(2))
    assert parse_answer("\\log_2 8") == N.Func("log", (num(8), num(2)))
    assert parse_answer("\\sqrt[3]{27}") == N.Pow(num(27), num(Fraction(1, 3)))
    assert parse_answer("|x-1|") == N.Func("abs", (N.add(x, num(-1)),))
    assert parse_answer("5!") == N.Func("factorial", (num(5),))


@pytest.mark.parametrize("bad", [
    "\\input{/etc/passwd}", "\\def\\x{1}", "\\immediate\\write18{ls}", "os.system('ls')", "__import__('os')",
    "\\frac{1}{", "((1)", "\\begin{pmatrix}1&2\\\\3\\end{pmatrix}", "1 2", "\\unknown{3}",
])
def test_outside_the_grammar_is_refused(bad):
    with pytest.raises(ParseError):
        parse_answer(bad)


def test_prose_is_text_never_code():
    assert parse_answer("import os") == N.Text("import os")


def test_deep_nesting_parses_innermost_first_and_huge_literals_are_refused():
    deep = parse_answer("\\sqrt{" * 200 + "2" + "}" * 200)  # folded group by group: no recursion limit
    assert isinstance(deep, N.Func) and deep.name == "sqrt"
    assert parse_answer("1+\\frac{1}{" * 60 + "1" + "}" * 60) == num(Fraction(*_fib_ratio(61)))
    assert parse_answer("-" * 5001 + "7") == num(-7)  # thousands of signs, read in a loop
    assert parse_answer("1/(" * 400 + "2" + ")" * 400) == num(2)
    with pytest.raises(ParseError, match="nesting"):
        parse_answer("(" * 60 + "1, 2" + ")," * 59 + "3)")  # nested tuples cannot be folded
    assert parse_answer("(" * 3000 + "1" + ")" * 3000) == num(1)  # redundant grouping is stripped
    assert parse_answer("((1, 2))") == N.Tuple((num(1), num(2)))
    with pytest.raises(ParseError):
        parse_answer("9" * 5000)
    with pytest.raises(ParseError):
        parse_answer("1e99999999")
    assert parse_answer("9^{9^{9^9}}") == N.Pow(num(9), N.Pow(num(9), N.Pow(num(9), num(9))))


def _fib_ratio(n: int) -> tuple[int, int]:
    """1 + 1/(1 + 1/(...)) with n ones is F(n+1)/F(n)."""
    a, b = 1, 1
    for _ in range(n - 1):
        a, b = b, a + b
    return b, a


@pytest.mark.skipif(not os.path.exists(os.path.join(DATA, "math500/test.jsonl")), reason="needs $RLVR_DATA_DIR/math500")
def test_every_math500_gold_answer_parses():
    failures = []
    with open(os.path.join(DATA, "math500/test.jsonl"), encoding="utf-8") as f:
        for line in f:
            answer = json.loads(line)["answer"]
            try:
                parse_answer(answer)
            except ParseError as e:
                failures.append((answer, str(e)))
    assert len(failures) <= 3, failures


@pytest.mark.parametrize("text,expected", [
    ("x² − 4", "x^2 - 4"), ("3√2", "3\\sqrt{2}"), ("12 × 4 ÷ 3", "16"), ("2π", "2\\pi"), ("x ≤ 7", "x \\le 7"),
    ("2½", "\\frac52"), ("25 m²", "25"), ("1,000.99m²", "1000.99"), ("4,\\!096,\\!000", "4096000"), ("32,\\! 349", "32349"),
    ("45 percent", "45\\%"), ("45 pct", "45\\%"), ("45 per cent", "45\\%"), ("12\\frac12\\%", "12.5\\%"), ("15 red marbles", "15"),
    ("x_{1}=1,\\quadx_{2}=2", "x_{1}=1, x_{2}=2"), ("1200 €", "1200"),
])
def test_normalised_notations(text, expected):
    assert parse_answer(text) == parse_answer(expected)


def test_not_equal_is_a_relation_never_a_factorial():
    assert parse_answer("x != 3") == N.Relation(("!=",), (N.Sym("x"), num(3)))
    assert parse_answer("x \\neq 3") == parse_answer("x ≠ 3") == parse_answer("x != 3")
    assert parse_answer("3! = 6") == N.Relation(("=",), (N.Func("factorial", (num(3),)), num(6)))
    assert parse_answer("x \\approx 2.5") == N.Relation(("≈",), (N.Sym("x"), num(Fraction(5, 2))))


def test_semicolons_separate_solutions_and_items_inside_brackets():
    assert parse_answer("-12; -11") == N.Answers((num(-12), num(-11)))
    groups = parse_answer("x=1, y=3; x=2, y=5")
    assert isinstance(groups, N.Answers) and all(isinstance(g, N.Answers) for g in groups.items)
    assert parse_answer("(0;-2;6)") == N.Tuple((num(0), num(-2), num(6)))


def test_words_for_symbols():
    assert parse_answer("\\text{infinite}") == parse_answer("infinitely many") == N.OO
    assert parse_answer("\\text{undefined}") == parse_answer("does not exist") == parse_answer("DNE") == N.Text("undefined")


@pytest.mark.parametrize("text", [
    "\\frac{1}{2}", "\\left(-\\frac 12, 0\\right) \\cup (0, 1]", "\\sin(x) y", "x_{12}", "2\\frac{1}{2}", "(x+1)^{2}(x-1)",
    "\\sqrt[3]{27}", "\\log_{2}(8)", "e^{i\\pi}", "\\{1, (2, 3)\\}", "\\begin{pmatrix}(1)&\\frac12\\\\3&4\\end{pmatrix}",
    "5\\text{ cm}^{2}", "f(x) = (x+1)(x-1)", "[(1+2), 4)", "\\frac{\\frac{1}{2}}{3}", "((1, 2))", "10^{10^{8}}",
])
def test_folded_groups_parse_to_the_same_tree(text):
    from envs.math.lexer import normalize, tokenize
    from envs.math.parser import Parser, fold_groups

    tokens = tokenize(normalize(text))
    nodes: list = []
    assert Parser(fold_groups(tokens, nodes), nodes=nodes).parse() == Parser(list(tokens), nodes=[]).parse()


def test_folding_groups_gives_the_same_trees_as_the_recursive_parse():
    # a group that is a tuple or an interval is left to the recursive parser
    assert parse_answer("\\left(-\\frac 12, 0\\right) \\cup (0, 1]") == N.Union_((
        N.Tuple((num(Fraction(-1, 2)), num(0))), N.Interval(num(0), num(1), True, False)))
    assert parse_answer("\\sin(x) y") == N.mul(N.Func("sin", (N.Sym("x"),)), N.Sym("y"))
    assert parse_answer("x_{12}") == N.Sym("x_12")
