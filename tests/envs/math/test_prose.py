"""Lenient extraction: the value stated by the closing sentence, never a value mentioned on the way."""

import pytest

from envs.math import check
from envs.math.extract import extract_answer
from envs.math.prose import last_statement

STATED = [
    # (response, the answer text found)
    ("Each box holds 12 pencils and there are 7 boxes, so Mia has 84 pencils in total.", "84"),
    ("The population grows to 3,250,000.", "3,250,000"),
    ("The probability is therefore 3/5.", "3/5"),
    ("Thus the range of $f$ is $(1,4]$.", "(1,4]"),
    ("Adding the two parts, 35 + 47 = 82 stamps.", "82"),
    ("Thus the discount is 25 percent.", "25 percent"),
    ("The angle measures 45°.", "45°"),
    ("After eating 3 of them, she has 12 apples left.", "12"),
    ("Since $2^{10} = 1024$, we have $n = 10$.", "n = 10"),
    ("The roots are 3 and -4.", "3, -4"),
    ("Therefore, $x = 5$ or $x = -5$.", "x = 5, x = -5"),
    ("the number is not 10 which is 1,000.99€", "1,000.99"),
    ("It is not 12 as I first thought; it is 16.", "16"),
    ("So, Jenna saved $135.", "135"),
    ("We get 18 marbles. Is that right? Yes.", "18"),
    ("So the width is 6 cm.\nCheck: 2(6) + 2(10) = 32, which matches.", "6"),
    ("Total saved: **450** dollars.", "450"),
    ("The total is 42.\n1. Check the sum.\n2. Done.", "42"),
    ("So the total is 42.\n\n### Step 5: Conclusion", "42"),
    ("Therefore $x \\geq 5$ is the solution.", "x \\geq 5"),
    ("$$\\frac{a}{b} = \\frac{2}{1}.$$ Therefore, the error increases by 100%.", "100%"),
    ("Answer \\[ 9 \\]", "9"),
    ("The answer is $\\frac{1}{2} \\$ = \\frac{10}{9}$", "\\frac{1}{2} \\$ = \\frac{10}{9}"),  # an escaped $ does not close math
]


@pytest.mark.parametrize("response,answer", STATED)
def test_the_closing_statement_gives_the_answer(response, answer):
    found = extract_answer(response, extraction="lenient")
    assert found is not None and found.answer == answer
    assert response[found.start:found.end] in (answer, response[found.start:found.end])  # spans point into the text


NO_ANSWER = [
    "She had 12 apples; after 3 days, 7 cats and 5 dogs.",  # several values, none stated
    "So 7 apples remain after she eats 5.",
    "The answer cannot be 5.",
    "x must be at least 5.",
    "The number of ways is 3 times 4.",
    "In Case 4, nothing changes.",
    "Answer $ \n 9 \n $",  # inline math broken over lines states nothing
    "1) Compute the mean.\n2) Compute the variance.\n3) Take the square root.",
    "I could not solve this problem.",
]


@pytest.mark.parametrize("response", NO_ANSWER)
def test_no_value_is_guessed(response):
    found = last_statement(response)
    assert found is None, found


NEAR_MISSES = [
    # (gold, response): the gold appears in the text but is not the final answer
    ("15", "First she buys 15 apples. After eating 3 of them, she has 12 apples left."),
    ("82", "Adding the two parts, 35 + 47 = 82 stamps, and removing the 12 damaged ones leaves 70."),
    ("100", "Total = 4 × 25 + 3 × 10 = 100 + 30 = 130."),
    ("32", "So the width is 6 cm.\nCheck: 2(6) + 2(10) = 32, which matches the perimeter."),
    ("12", "It is not 12 as I first thought; it is 16."),
    ("40", "I first got 40, but that double-counts the corner.\nThe correct count is 36."),
    ("6", "It takes 6 hours; therefore it arrives at 3 pm."),
    ("5", "We need to find 10% of 50. That is 5 percent of the total, so 2.5."),
    ("5", "So $x$ is not equal to 5."),
    ("2", "The total is 42.\n1. Check the sum.\n2. Done."),
    ("1024", "Since $2^{10} = 1024$, we have $n = 10$."),
    ("0.5", "The route goes 200 m east and 300 m north.\nThe distance walked is 500 meters."),
    ("84", "Each box holds 12 pencils and there are 7 boxes, so Mia has 72 pencils in total."),
    ("1990", "In 1990 the population was 2 million."),
]


@pytest.mark.parametrize("gold,response", NEAR_MISSES)
def test_a_value_mentioned_on_the_way_is_never_rewarded(gold, response):
    assert not check(response, gold, extraction="lenient").passed


def test_strict_mode_ignores_prose_and_lenient_reads_it():
    response = "We count both albums.\nAdding the two parts, 35 + 47 = 82 stamps."
    assert check(response, "82").status.value == "no_answer"
    assert check(response, "82", extraction="lenient").passed
    assert check("He spent \\boxed{60} dollars. Later he earned 75 more.", "60", extraction="lenient").passed  # a box still wins


def test_explicit_answers_win_over_prose_in_lenient_mode():
    text = "The answer is 12.\nCheck: 3 × 4 = 12, and 12 / 3 = 4."
    assert extract_answer(text, extraction="lenient").answer == "12"


def test_prose_reading_is_linear_in_the_response():
    text = "The value is 7. " * 200_000 + "So the final count is 9 cats."
    assert extract_answer(text, extraction="lenient").answer == "9"
