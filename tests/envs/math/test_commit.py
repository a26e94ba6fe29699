"""Commitment: an answer offers one value, in both extraction modes (envs.math.commit, numwords)."""

from __future__ import annotations

import pytest

from envs.math import check, commit, numwords
from envs.math.forms import Question

MODES = ("strict", "lenient")


@pytest.mark.parametrize("content, after, math", [
    ("x = 5", "", True), ("\\frac{1}{2}", "", True), ("12 ", " and", True), ("2xy", "", True),
    ("12 or ", "1", False), ("25 per day after selling 10 ", "", False), ("10 + ", "5", False), ("12", "15", False),
    ("", "", False), ("\\frac{1}{2", "", False), ("12 and ", "", False),
])
def test_a_dollar_sign_opens_math_only_around_math(content, after, math):
    assert commit.is_math_span(content, after) is math


def test_remarks_and_alternatives_in_brackets():
    text = "306 (I multiplied 34 by 9) and (15) and (or 16) and (3, 4) and (C) and [3 × 4] and (15 if we count tips)"
    remarks = [text[a:b] for a, b in commit.remarks(text)]
    assert remarks == ["(I multiplied 34 by 9)", "[3 × 4]"]
    offered = [text[a:b] for a, b in commit.alternatives(text)]
    assert offered == ["(15)", "(or 16)", "(15 if we count tips)"]
    dash = "12 — that's 3 boxes of 4"
    assert [dash[a:b] for a, b in commit.remarks(dash)] == [" — that's 3 boxes of 4"]


@pytest.mark.parametrize("between, kind", [
    (" or ", "or"), (", or maybe ", "or"), (" apples or ", "or"), (" and/or ", "or"), (" (", "or"), (", ", "list"), (" and ", "list"),
    (" to ", "range"), ("–", "range"), ("/", "slash"), (" apples, ", "list"), (" — I subtracted ", None), (" apples altogether, ", None),
    (" per day after selling ", None),
])
def test_what_joins_two_values(between, kind):
    assert commit.joined_by(between) == kind


def test_a_copied_sentence_writes_the_question_s_numbers_beside_its_words():
    q = Question.of("Tom has 12 apples. He gives 0 apples to Ann. How many apples does Tom have now?")
    assert commit.copied("Tom has 12 apples.", q)
    assert commit.copied("So, Tom has 12 apples now.", q)
    assert not commit.copied("Tom has 15 apples.", q)  # 15 is not the question's
    assert not commit.copied("He ends up with 12.", q)  # 12 beside other words: stated
    assert not commit.copied("12", q)
    joy = Question.of("Joy can read 8 pages of a book in 20 minutes. How many hours will it take her to read 120 pages?")
    assert not commit.copied("So, it will take Joy 8 hours to read 120 pages.", joy)


@pytest.mark.parametrize("text, value", [
    ("zero", 0), ("eight miles per hour", 8), ("twenty-five", 25), ("one hundred and five", 105), ("three thousand four hundred", 3400),
    ("two and a half", 2.5), ("one half", 0.5), ("\\text{twelve}", 12), ("Seventeen apples", 17),
    ("five plus three", None), ("half of 10", None), ("two thirds", None), ("12", None), ("one or two", None),
])
def test_numbers_in_words(text, value):
    assert numwords.value_of(text) == value


def test_number_words_are_found_with_their_spans():
    text = "She had twenty-one apples and a hundred pears, then two and a half more."
    assert [(text[s.start:s.end], s.digits) for s in numwords.find(text)] == [("twenty-one", "21"), ("a hundred", "100"), ("two and a half", "2.5")]
    assert numwords.find("Someone often wrote on the stone.") == []


HEDGES = [
    "Answer: $12 or $15", "Answer: 12 or 15", "The answer is either 15 or 12.", "\\boxed{12} or \\boxed{15}", "\\boxed{12 \\text{ or } 15}",
    "The answer is between 10 and 15.", "Answer: 12 (or 15 if I made a mistake)", "The answer is 12. Or maybe 15.", "Answer: 12, 15",
    "The answer is 12 and/or 15.", "Answer: $12/$15", "The answer is 12 (could be 15).", "The answer is 12. However, it could be 15 if we count twice.",
    "\\boxed{15}\n\nor maybe \\boxed{12}", "Answer: 12 or more", "\\boxed{12 \\text{ or more}}", "Answer: at least 12", "\\boxed{12} or so",
    "Answer: twelve or fifteen", "The answer is 10 to 15.", "Answer: 12–15",
]


@pytest.mark.parametrize("extraction", MODES)
@pytest.mark.parametrize("response", HEDGES)
def test_a_hedge_fails_with_reason_hedged(response, extraction):
    v = check(response, "12", extraction=extraction, question="How many apples are there?")
    assert not v.passed
    assert v.info.get("reason") == "hedged", (response, v.extracted, v.info)


PROSE_HEDGES = ["She makes either $12 or $15 a day.", "Either she makes 15 or she makes 12 dollars.", "I think it's 15, but it might be 12.",
                "It could be 15. It could also be 12.", "So she makes between $10 and $15 a day.", "So she makes 12 dollars, maybe 15."]


@pytest.mark.parametrize("response", PROSE_HEDGES)
def test_a_hedge_in_prose_fails_in_lenient_mode(response):
    v = check(response, "12", extraction="lenient", question="How much does she make a day?")
    assert not v.passed and v.info.get("reason") == "hedged", (response, v.extracted, v.info)


def test_several_values_answer_a_gold_with_several_parts():
    assert check("The solutions are $x = 5$ or $x = -5$.", "5, -5", extraction="lenient").passed
    assert check("\\boxed{2} and \\boxed{3}", "2, 3").passed
    assert check("Answer: x = 5 or x = -5", "\\pm 5").passed
    v = check("Answer: 3 or 4", "5, 6")
    assert not v.passed and "reason" not in v.info  # wrong, not hedged: the gold has several parts


COMMITTED = [
    ("Answer: 306 (I multiplied 34 by 9).", "306"), ("The answer is 4 bolts in total (3 red and 1 green).", "4"),
    ("The answer is 17, not -17.", "17"), ("Answer: $25 per day after selling 10 eggs.", "25"), ("The answer is 81-27, which is 54.", "54"),
    ("The answer is zero.", "0"), ("The answer is eight miles per hour.", "8"), ("Answer: 12 — that's 3 boxes of 4.", "12"),
    ("Answer: 12 [3 × 4]", "12"), ("The answer is 36/3, or 12.", "12"), ("Answer: 3 x 4 = 12", "12"), ("The answer is 90-14, i.e. 76.", "76"),
    ("\\boxed{\\text{twelve}}", "12"), ("\\boxed{12}, or more precisely \\boxed{12}", "12"), ("Answer: 12 (twelve)", "12"),
    ("The answer is 18 dollars: 9 eggs at $2.", "18"), ("The answer is $18 which she makes daily from 9 eggs.", "18"),
    ("The answer is 18 dollars; 9 eggs times 2 dollars.", "18"), ("Final Answer: The largest $n$ is 18.", "18"),
]


@pytest.mark.parametrize("extraction", MODES)
@pytest.mark.parametrize("response, gold", COMMITTED)
def test_a_value_followed_by_a_remark_is_that_value(response, gold, extraction):
    v = check(response, gold, extraction=extraction, question="Compute the value.")
    assert v.passed, (response, v.extracted, v.info)


def test_number_words_count_only_where_the_gold_is_a_number():
    assert check("The answer is three.", "3").passed
    assert not check("The answer is three.", "\\text{(B)}").passed
    assert check("The answer is three.", "\\text{three}", numeric_literal=False).passed
    assert not check("The answer is five plus three.", "8").passed  # an operation in words


def test_the_echo_alone_still_fails_and_its_value_passes():
    q = "Compute 81-27."
    for attack in ["The answer is 81-27.", "Answer: 81-27", "The answer is 81-27, which is the difference of 81 and 27."]:
        for extraction in MODES:
            assert not check(attack, "54", extraction=extraction, question=q, numeric_literal=True).passed, attack
    assert check("The answer is 81-27, which is 54.", "54", question=q, numeric_literal=True).passed


LENIENT = [
    ("To compute 70+12, we add 70 and 12, which results in 82. This is the sum of 70 and 12.", "Compute 70+12.", "82", True),
    ('So the result is "82." That is the sum of 70 and 12.', "Compute 70+12.", "82", True),
    ("We add 70 and 12.", "Compute 70+12.", "82", False),
    ("Tom has 12 apples.", "Tom has 12 apples. He eats none. How many apples does he have?", "12", False),
    ("Tom has 12 apples. Tom has 12 apples. Tom has 12 apples. Tom has", "Tom has 12 apples. He eats none. How many apples?", "12", False),
    ("So she saves 10 cents.\n\nNext, we calculate", "How much does she save?", "10", False),
    ("So, 1 candle costs 12 dollars. So, 1 candle costs 12 dollars. So, 1 candle costs 12 dollars.", "How much does he spend?", "12", False),
    ("The third friend said 25% more, so the total is 80 + ", "One says 80. What is the average guess?", "80", False),
    ("24 is a special number that can be calculated using the formula 24 = 2 * 1.", "Compute 24*1.", "24", False),
    ("So 24 is the answer.", "Compute 24*1.", "24", True),
    ("The answer to 75-53 is unknown to me.", "Compute 75-53.", "22", False),
]


@pytest.mark.parametrize("response, question, gold, passes", LENIENT)
def test_lenient_mode_cannot_be_fed_by_the_prompt(response, question, gold, passes):
    v = check(response, gold, extraction="lenient", question=question, numeric_literal=True)
    assert v.passed is passes, (response, v.extracted, v.info.get("rule"))


def test_every_verdict_says_which_rule_decided():
    v = check("We add 70 and 12, which results in 82. This is the sum of 70 and 12.", "82", extraction="lenient", question="Compute 70+12.")
    assert "results in" in v.info["rule"] and "restates operands" in v.info["rule"]
    assert check("We add them.\nThen we stop.", "1", extraction="strict").info["rule"].startswith("no explicit answer")
    assert check("\\boxed{3}", "3").info["rule"] == "the last \\boxed{}"


# -- answers not committed to: hypotheses, retractions, questions, truncation --------------------

_UNCOMMITTED = [
    "If the answer is 42, then each bag has 7. So the answer is",
    "Suppose the answer is 42. Then",
    "Let's test whether the answer is 42. If so, then",
    "Answer: 42\nWait, no. 6*7 =",
    "The answer is 42.\nActually wait, that is wrong, let me redo:",
    "Answer: 42?",
    "Answer: 42? Or maybe 43?",
]


@pytest.mark.parametrize("truncated", [True, False])
@pytest.mark.parametrize("extraction", ["strict", "lenient"])
@pytest.mark.parametrize("response", _UNCOMMITTED)
def test_a_hypothesis_a_retraction_or_a_question_is_no_answer(response, extraction, truncated):
    v = check(response, "42", extraction=extraction, truncated=truncated)
    assert not v.passed, (response, v.extracted, v.info)


def test_a_question_marked_answer_before_an_alternative_is_a_hedge():
    assert check("Answer: 42? Or maybe 43?", "42").info.get("reason") == "hedged"


@pytest.mark.parametrize("response", ["If we add them, the answer is 42.", "The answer is 42. Let me double check: 6*7 = 42.",
                                      "Answer: 42\nNo further work is needed.", "\\boxed{42}"])
def test_a_stated_answer_still_passes(response):
    assert check(response, "42").passed


@pytest.mark.parametrize("response, gold", [("Answer: 4", "4"), ("The answer is 42.", "42"), ("42", "42")])
def test_strict_mode_credits_a_truncated_response_only_for_a_committed_answer(response, gold):
    assert check(response, gold).passed  # finished: the answer stands
    v = check(response, gold, truncated=True)  # cut: "4" may be the start of 45, "42." of 42.5
    assert not v.passed and v.info.get("cut") == "truncated"


@pytest.mark.parametrize("response", ["The answer is 42. Let me check: 6 ×", "\\boxed{42} Let me verify by"])
def test_strict_mode_credits_a_truncated_response_that_committed(response):
    assert check(response, "42", truncated=True).passed
