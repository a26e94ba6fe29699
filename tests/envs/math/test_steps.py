import tasks
from envs.math import check
from envs.math.steps import step_rewards


def test_arithmetic_scratchpad_lines_get_step_rewards():
    text = "347*8=2776\n347*50=17350\n2776+17350=20126\nAnswer: 20126"
    steps = step_rewards(text)
    assert [s.label for s in steps] == ["347*8=2776", "347*50=17350", "2776+17350=20126"]
    assert [s.reward for s in steps] == [1.0, 1.0, 1.0]
    assert all(text[s.start:s.end] == s.label for s in steps)


def test_a_wrong_line_gets_zero_and_the_others_keep_theirs():
    steps = step_rewards("347*8=2776\n347*50=17000\n2776+17000=19776\nAnswer: 19776")
    assert [s.reward for s in steps] == [1.0, 0.0, 1.0]


def test_latex_chains_gsm8k_notes_and_rounding():
    text = (
        "We have $\\frac{3}{4} \\cdot 8 = 6$ and 10/3 = 3.33, so $2x + 3 = 7$ gives x = 2.\n"
        "Also $\\sqrt{8} = 2\\sqrt{2} = 3$.\nShe makes 9 * 2 = $<<9*2=18>>18.\n\\boxed{2}"
    )
    steps = step_rewards(text)
    got = {s.label: s.reward for s in steps}
    assert got["\\frac{3}{4} \\cdot 8 = 6"] == 1.0
    assert got["10/3 = 3.33"] == 1.0  # rounded to the places written
    assert got["\\sqrt{8} = 2\\sqrt{2}"] == 1.0 and got["2\\sqrt{2} = 3"] == 0.0
    assert got["9*2=18"] == 1.0
    assert not any("x" in label for label in got)  # equations with variables are not steps
    assert all(text[s.start:s.end] == s.label for s in steps)


def test_every_arithmetic_gold_solution_has_all_steps_correct():
    task = tasks.make("arithmetic-v1")
    for p in task.problems("test", limit=100):
        v = task.env.verify(p, task.solution(p))
        assert v.passed and v.steps and all(s.reward == 1.0 for s in v.steps)


def test_steps_are_reported_even_without_an_answer_and_can_be_disabled():
    v = check("2+2=4\n3+3=7", "6")
    assert v.status.value == "no_answer" and [s.reward for s in v.steps] == [1.0, 0.0]
    assert check("2+2=4\nAnswer: 4", "4", process_rewards=False).steps == ()


def test_huge_completion_gets_no_steps_rather_than_a_slow_scan():
    assert step_rewards("1+1=2\n" * 20_000) == ()
