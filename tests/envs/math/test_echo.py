"""Rewards a model cannot game by copying its prompt (issue 20, item 3).

Each attack is tried on a class of problems (random arithmetic of every operator and size, sum
chains, MATH-style expressions), in strict and lenient extraction, boxed and ``Answer:`` forms;
every attack must fail while the correct value passes.
"""

from __future__ import annotations

import random

import pytest

import tasks
from envs.math import MathEnv, check
from envs.types import Problem, Status

MODES = ("strict", "lenient")


def _arithmetic_problems(n: int = 60) -> list[Problem]:
    """Problems of every operator and operand size arithmetic-v1 can be configured with."""
    out = []
    for config in ({}, {"min_digits": 1, "max_digits": 1}, {"min_digits": 3, "max_digits": 4, "mul_max_digits": 2}):
        task = tasks.make("arithmetic-v1", **config)
        out += task.problems("validation", limit=n // 3)
    return out


ARITHMETIC = _arithmetic_problems()


def _expression_echoes(a: int, op: str, b: int) -> list[str]:
    expr = f"{a}{op}{b}"
    spelled = {"+": "+", "-": "-", "*": "\\times"}[op]
    commuted = f"{b}{op}{a}" if op in "+*" else f"{a} {op} {b}"
    forms = [expr, f"{expr}.", f"{a} {op} {b}", f"{a} {spelled} {b}", commuted, f"({expr})"]
    echoes = []
    for f in forms:
        echoes += [f, f"Answer: {f}", f"\\boxed{{{f}}}", f"The answer is {f}.", f"Final Answer: ${f}$", f"#### {f}"]
    return echoes


@pytest.mark.parametrize("extraction", MODES)
def test_echoes_of_the_question_fail_and_the_value_passes_on_random_arithmetic(extraction):
    env = MathEnv(extraction=extraction)
    for p in ARITHMETIC:
        a, op, b = p.metadata["a"], p.metadata["op"], p.metadata["b"]
        gold = p.reference
        attacks = _expression_echoes(a, op, b) + [p.prompt, p.prompt.strip(), f"Answer: {p.prompt.strip()}", f"\\boxed{{{p.prompt.strip()}}}"]
        for operand in {a, b} - {int(gold)}:  # an operand that is the value is the right answer (98*1)
            attacks += [f"Answer: {operand}", f"\\boxed{{{operand}}}", str(operand)]
        for attack in attacks:
            v = env.verify(p, attack)
            assert not v.passed, (p.prompt, attack, v.extracted, v.info)
            assert v.status in (Status.OK, Status.NO_ANSWER), (attack, v.status, v.info)
        for correct in [f"Answer: {gold}", f"\\boxed{{{gold}}}", gold, f"{a}{op}{b} = {gold}\nAnswer: {gold}",
                        f"Answer: {a}{op}{b} = {gold}", f"The answer is {gold}.", p.metadata["solution"]]:
            assert env.verify(p, correct).passed, (p.prompt, correct)


def test_echoes_fail_without_the_question_where_a_number_is_asked_for():
    """The literal rule alone (no question given) refuses every unevaluated expression."""
    for p in ARITHMETIC[:20]:
        a, op, b = p.metadata["a"], p.metadata["op"], p.metadata["b"]
        for attack in _expression_echoes(a, op, b):
            assert not check(attack, p.reference, numeric_literal=True).passed, attack
        assert check(f"Answer: {p.reference}", p.reference, numeric_literal=True).passed


def test_echoes_fail_where_expressions_are_answers_once_the_question_is_known():
    """numeric_literal=False (MATH) accepts expressions, yet never the question's own."""
    env = MathEnv(numeric_literal=False)
    for p in ARITHMETIC[:20]:
        a, op, b = p.metadata["a"], p.metadata["op"], p.metadata["b"]
        for attack in _expression_echoes(a, op, b):
            assert not env.verify(p, attack).passed, attack
        assert env.verify(p, f"\\boxed{{{p.reference}}}").passed


LENIENT_RESTATEMENTS = [
    "The answer to {expr} is unknown to me.",
    "The answer to ${expr}$ is unknown to me.",
    "I think {expr} is hard.",
    "Let me compute {expr}. I am not sure what it is.",
    "Compute {expr}.",
    "The result of {a} and {b} is unknown.",
    "The numbers are {a} and {b}, but I cannot finish.",
    "{a} and {b} are the numbers given.",
]


def test_lenient_extraction_never_takes_a_restated_question_or_operand():
    env = MathEnv(extraction="lenient")
    for p in ARITHMETIC:
        a, op, b = p.metadata["a"], p.metadata["op"], p.metadata["b"]
        for template in LENIENT_RESTATEMENTS:
            text = template.format(expr=f"{a}{op}{b}", a=a, b=b)
            v = env.verify(p, text)
            assert not v.passed, (text, v.extracted)
            assert v.extracted is None or v.extracted not in (f"{a}{op}{b}", str(a), str(b)), (text, v.extracted)
        assert env.verify(p, f"So {a}{op}{b} = {p.reference}.").passed
        assert env.verify(p, f"The result is {p.reference} in total.").passed


def test_sum_chains_and_gsm8k_style_golds_need_the_number():
    task = tasks.make("reasoning-gym/sum-chain-v1")
    env = task.env
    for p in task.problems("test", limit=30):
        expr = p.metadata["reasoning_gym"]["metadata"]["expression"]
        for attack in [f"Answer: {expr}", f"\\boxed{{{expr}}}", expr, p.prompt.strip()]:
            assert not env.verify(p, attack).passed, attack
        assert env.verify(p, task.solution(p)).passed and env.verify(p, f"Answer: {p.reference}").passed
    gsm = Problem("g", "Split 544 dollars among 8 friends. How much does each get?", "68")
    env = MathEnv()
    for attack in ["Answer: 544/8", "\\boxed{\\frac{544}{8}}", "#### 544 / 8", "Answer: 544 \\div 8"]:
        assert not env.verify(gsm, attack).passed, attack
    for correct in ["#### 68", "Answer: $68", "\\boxed{68 \\text{ dollars}}", "Each gets 544/8 = 68 dollars.\n#### 68"]:
        assert env.verify(gsm, correct).passed, correct


MATH_STYLE = [  # (question, gold, a correct expression answer, the echo)
    ("Simplify $\\sqrt{8}$.", "2\\sqrt{2}", "\\boxed{\\sqrt{4}\\cdot\\sqrt{2}}", "\\boxed{\\sqrt{8}}"),
    ("What is $4^5$?", "1024", "\\boxed{2^{10}}", "\\boxed{4^5}"),
    ("Compute $\\dbinom{8}{4}$.", "70", "\\boxed{\\frac{8!}{4!\\,4!}}", "\\boxed{\\dbinom{8}{4}}"),
    ("Convert $1230_{4}$ to base 10.", "108", "\\boxed{108}", "\\boxed{1230_{4}}"),
    ("Rationalize the denominator of $\\frac{3}{\\sqrt{2}}$.", "\\frac{3\\sqrt{2}}{2}", "\\boxed{\\frac{3}{2}\\sqrt{2}}", "\\boxed{\\frac{3}{\\sqrt{2}}}"),
]


@pytest.mark.parametrize("question, gold, correct, echo", MATH_STYLE)
def test_math_expression_answers_pass_where_the_environment_allows_them_and_echoes_do_not(question, gold, correct, echo):
    env = MathEnv(numeric_literal=False)
    p = Problem("m", question, gold)
    assert env.verify(p, correct).passed
    assert not env.verify(p, echo).passed
    assert env.verify(p, f"\\boxed{{{gold}}}").passed


def test_the_question_may_state_the_answer_exactly_as_the_gold():
    """A multiple-choice style question lists the answer; writing it as the gold is no echo."""
    env = MathEnv(numeric_literal=False)
    p = Problem("m", "What is $\\sqrt{53}$ in simplest radical form?", "\\sqrt{53}")
    assert env.verify(p, "\\boxed{\\sqrt{53}}").passed


def test_task_defaults_require_literals_except_where_expressions_are_answers():
    literal = {"arithmetic-v1", "gsm8k-v1", "aime24-v1", "aime25-v1", "amc23-v1", "reasoning-gym/sum-chain-v1"}
    for tid in literal:
        assert tasks.make(tid).env.numeric_literal is True, tid
    for tid in ("hendrycks-math-v1", "math500-v1"):
        assert tasks.make(tid).env.numeric_literal is False, tid


@pytest.mark.parametrize("extraction", MODES)
def test_a_bare_line_that_does_not_parse_is_no_answer(extraction):
    p = Problem("p", "What is 47+38?", "85")
    v = MathEnv(extraction="strict").verify(p, "The sum of 47 and 38 is 85.")
    assert v.status is Status.NO_ANSWER and not v.passed and v.extracted is None and v.info["parse_error"]
    v = check("The sum of 47 and 38 is unknown.", "85", extraction=extraction, question=p.prompt)
    assert v.status is Status.NO_ANSWER and not v.passed
    assert MathEnv(extraction="lenient").verify(p, "The sum of 47 and 38 is 85.").passed  # lenient reads the sentence
    assert check("85", "85").passed and check("$85$", "85").passed  # bare answers that parse still count


def test_metrics_see_an_echo_as_a_wrong_answer_and_prose_as_no_answer():
    env = MathEnv()
    p = Problem("p", "Compute 68*8.\n", "544")
    echo = env.verify(p, "Answer: 68*8")
    assert echo.status is Status.OK and echo.reward == 0.0 and echo.extracted == "68*8" and "numeric literal" in echo.info["rejected"]
    restated = MathEnv(numeric_literal=False).verify(p, "Answer: 68*8")
    assert restated.status is Status.OK and "restates the question" in restated.info["rejected"]
    prose = env.verify(p, "Compute 68*8.")
    assert prose.status is Status.NO_ANSWER and prose.reward == 0.0


def test_lenient_question_numbers_give_way_to_the_value_stated():
    env = MathEnv(extraction="lenient")
    p = Problem("g", "Jim watches TV for 3 hours a night, 3 nights a week. How many hours in 4 weeks?", "36")
    assert env.verify(p, "So in 4 weeks, he spends 9*4=36 hours.").passed  # 4 is the question's, 36 the value
    p = Problem("g", "A chalk is recycled when it is smaller than 2 inches. In how many days is it recycled?", "2")
    assert env.verify(p, "Since 1.76 is less than 2 inches, he will recycle this stick in 2 days.").extracted == "2"
    p = Problem("g", "It rains until the tank is full, from 6 pm on. When is it full?", "10")
    assert env.verify(p, "The tank will be filled at 6 + 4 = 10pm.").passed  # a unit glued to the result
