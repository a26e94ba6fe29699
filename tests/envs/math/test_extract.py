import pytest

from envs.math.extract import boxed_answers, extract_answer


def test_last_box_wins_over_earlier_self_corrected_box():
    text = "So \\boxed{5}. Hmm, that is wrong; correcting: the result is \\boxed{7}."
    assert extract_answer(text).answer == "7"


def test_adjacent_boxes_form_one_multi_part_answer():
    assert extract_answer("The roots are \\boxed{2} and \\boxed{3}.").answer == "2, 3"
    assert extract_answer("\\boxed{2}, \\boxed{-1}").answer == "2, -1"


def test_nested_braces_and_escaped_set_braces_are_matched():
    assert extract_answer("$\\boxed{\\frac{1}{\\sqrt{2}}}$").answer == "\\frac{1}{\\sqrt{2}}"
    assert extract_answer("\\boxed{\\{1, 2\\}}").answer == "\\{1, 2\\}"
    assert extract_answer("\\fbox{12}").answer == "12"
    assert extract_answer("\\boxed 5 is it").answer == "5"


def test_unclosed_box_is_ignored():
    assert boxed_answers("\\boxed{3") == []
    assert extract_answer("\\boxed{3") is not None  # one short line: a bare answer, not a box
    assert extract_answer("\\boxed{3").method == "bare"


def test_markers():
    assert extract_answer("work\nAnswer: 20126").answer == "20126"
    assert extract_answer("So the answer is $18$ dollars.").answer == "18"
    assert extract_answer("The final answer is 42.").answer == "42"
    assert extract_answer("steps\n#### 1,000").answer == "1,000"
    assert extract_answer("**Final Answer:** 12").answer == "12"


def test_latest_marker_or_box_wins():
    assert extract_answer("\\boxed{5}\nWait, no.\nAnswer: 7").answer == "7"
    assert extract_answer("Answer: 7\nActually \\boxed{9}").answer == "9"


def test_span_points_into_the_completion():
    text = "The answer is $18$ dollars."
    found = extract_answer(text)
    assert text[found.start:found.end] == "18"


def test_strict_has_no_answer_without_marker_lenient_reads_the_last_statement():
    prose = "First we add 3 and 4 to get 7.\nThen we double it to get 14."
    assert extract_answer(prose) is None
    found = extract_answer(prose, extraction="lenient")
    assert found.answer == "14" and found.method == "sentence"
    assert extract_answer("we get $x=3$ and then\n$y = 4$", extraction="lenient").answer == "y = 4"


def test_unknown_extraction_mode_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="strict, lenient"):
        extract_answer("\\boxed{1}", extraction="loose")


def test_bare_one_line_answer_is_its_own_answer():
    assert extract_answer("  $\\frac{1}{2}$ ").answer == "$\\frac{1}{2}$"
    assert extract_answer("2i").method == "bare"
    assert extract_answer("") is None


def test_megabyte_completion_is_scanned_linearly():
    junk = "\\boxed{" * 100_000 + "x" * 500_000 + "\nthe answer is " * 50_000
    text = junk + "\n\\boxed{41}"
    assert extract_answer(text).answer == "41"


@pytest.mark.parametrize("text,answer", [
    ("The answer is 42. Let me double check.", "42"),
    ("Final Answer: The final answer is 14400. I hope it is correct.", "14400"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Final Answer: The smallest prime is 11, not 13.", "11"),
    ("The answer is 5. No wait, the answer is 7.", "7"),
    ("The answer is 3.75. Done.", "3.75"),
    ('Final Answer: The final answer is \\"$12 $ and $13 $\\". I hope it is correct.', "12, 13"),
    ("Final answer is B", "B"),
])
def test_marker_answers_end_at_their_sentence(text, answer):
    assert extract_answer(text).answer == answer


def test_a_judgement_about_an_answer_is_not_an_answer():
    text = "So $a = \\boxed{-5}$.\nMultiplying out confirms it, so the answer is correct."
    assert extract_answer(text).answer == "-5"


def test_box_labels_are_kept_when_boxes_are_merged():
    found = extract_answer("\\( y_1 = \\boxed{x + 1} \\) and \\( y_2 = \\boxed{2x} \\)")
    assert found.answer == "y_1 = x + 1, y_2 = 2x"
    assert extract_answer("so $x = \\boxed{5}$.").answer == "5"  # a single box keeps only its content
