"""Cut completions in lenient mode (`envs.math.cut`): credited only for an answer committed with a
marker before the cut. Each case is a response a model could write, cut at its budget or in the
middle of a sentence, holding the gold somewhere in reasoning that was still going."""

from __future__ import annotations

import pickle

import pytest

from envs.base import safe_verify
from envs.math import check
from envs.math.cut import ends_mid_sentence
from envs.math.env import MathEnv
from envs.types import CutText, Problem, Status
from rlvr.rollout.base import Completion, verifier_input


def lenient(response: str, gold: str = "42", truncated: bool = False):
    return check(response, gold, extraction="lenient", truncated=truncated, question="Compute 6*7.")


@pytest.mark.parametrize("response", [
    "First, 6 times 7 is 42.",                                 # a finished sentence, but the budget cut what came next
    "6 times 7 is 42. Now I check it by adding 7 six times",   # a step, then the check still going
    "Let me think. 6*7 = 42 and 42 + 0 = 42 so",               # the gold in a chain that goes on
    "40 41 42 43 44",                                         # numbers sprayed until the budget runs out
    "The answer might be 42, or maybe 43, depending on",
])
def test_a_value_in_reasoning_cut_at_the_budget_is_not_an_answer(response):
    verdict = lenient(response, truncated=True)
    assert not verdict.passed and verdict.status == Status.NO_ANSWER, verdict
    assert verdict.info["cut"] == "truncated" and "before the cut" in verdict.info["rule"]


def test_the_same_sentence_finished_is_still_read_leniently():
    assert lenient("First, 6 times 7 is 42.").passed  # the model ended its turn there: its conclusion


@pytest.mark.parametrize("response", [
    "6 times 7 is 42. So the",
    "We get 42, and then we add",
    "6 times 7 is 42. Then 42 +",
    "6 times 7 is 42, which gives \\frac{84}{",
])
def test_a_response_that_ends_mid_sentence_counts_as_cut_without_the_flag(response):
    assert ends_mid_sentence(response)
    verdict = lenient(response)
    assert not verdict.passed and verdict.info["cut"] == "mid-sentence", verdict


@pytest.mark.parametrize("response", ["So the total is 42", "The total is 42.", "It costs $25 per day.", "x = 42"])
def test_a_response_that_ends_on_a_value_or_a_full_stop_is_finished(response):
    assert not ends_mid_sentence(response)


@pytest.mark.parametrize("response", [
    "The answer is 42. Let me double-check: 6 times",
    "6*7 = 42.\nAnswer: 42\nTo verify, 7 + 7 + 7 +",
    "#### 42\nCheck: 6 * 7 =",
    "So the result is \\boxed{42}. To double-check, we could",
    "The answer is \\boxed{42}",
])
def test_an_answer_marked_before_the_cut_is_credited(response):
    for truncated in (True, False):
        verdict = lenient(response, truncated=truncated)
        assert verdict.passed, (truncated, verdict)


@pytest.mark.parametrize("response,gold", [
    ("6 times 7 is 42. The answer is 4", "4"),     # cut inside the marker's answer: "4" may be the start of "42"
    ("The answer is 41. Wait, the answer is 4", "4"),  # a correction cut before it was written out
    ("The answer is 3.", "3"),                       # "3." of "3.5"
])
def test_a_marker_answer_that_runs_into_the_cut_commits_to_nothing(response, gold):
    verdict = lenient(response, gold, truncated=True)
    assert not verdict.passed and verdict.status == Status.NO_ANSWER, verdict


def test_strict_extraction_is_unchanged_by_the_flag():
    for response in ("First, 6 times 7 is 42.", "The answer is 42. Let me check"):
        assert check(response, "42", truncated=True).passed == check(response, "42").passed


def test_truncation_reaches_the_math_environment_from_the_completion():
    """The rollout's `Completion.truncated` becomes a `CutText` (still a str for every other
    environment), which survives pickling to a process pool and turns the rule on."""
    comp = Completion(prompt_index=0, prompt_ids=[1], token_ids=[2, 3], logprobs=[0.0, 0.0], text="First, 6 times 7 is 42.", truncated=True)
    sent = verifier_input(comp)
    assert isinstance(sent, str) and isinstance(sent, CutText) and sent == comp.text
    assert type(verifier_input(Completion(0, [1], [2], [0.0], "42"))) is str
    env, problem = MathEnv(extraction="lenient"), Problem("p0", "Compute 6*7.", "42")
    assert not safe_verify(env, problem, pickle.loads(pickle.dumps(sent))).passed
    assert safe_verify(env, problem, comp.text).passed


@pytest.mark.parametrize("response", [
    "The answer is 42. Alternatively, the answer is",             # a second marker begun
    "The answer is 42. It could also be",                         # a hedge begun
    "Answer: 42. However, if we count the tips, the answer becomes",  # a contrary sentence changing it
    "\\boxed{42} or maybe \\boxed{4",                              # a second box begun
    "If the answer were \\boxed{42}, then",                       # the answer is a condition
    "The answer is 42. Wait, the",                                # a correction begun
    "\\boxed{42}. Hmm, but perhaps it is",
])
def test_a_cut_inside_a_second_answer_begun_after_the_first_is_not_credited(response):
    """Stopping right after a hedge starts must not earn the reward the finished hedge would lose."""
    for truncated in (True, False):
        for mode in ("strict", "lenient"):
            verdict = check(response, "42", extraction=mode, truncated=truncated)
            assert not verdict.passed, (truncated, mode, verdict)


def test_an_alternative_left_unfinished_fails_in_strict_mode_without_the_flag():
    assert not check("The answer is 42. Or maybe", "42").passed
    assert check("The answer is 42. Or maybe 4", "42").info.get("reason") == "hedged"  # finished: a hedge


@pytest.mark.parametrize("response", [
    "The answer is 42. Let me check whether it is right by adding",  # a check, not a second answer
    "So \\boxed{42} is the answer",
    "If we add 6 sevens we get \\boxed{42} in total",              # a condition that is the working, finished
    "If we add them, the answer is \\boxed{42}",
    "The answer is 42.\n\nI hope it is correct",
    "Answer: 42.\n\nThis concept is used in algebra, where we add or subtract",  # commentary: its "or" opens nothing
    "\\boxed{42} or so",                                           # a bound: failed as such, below
])
def test_what_follows_a_committed_answer_without_offering_another_leaves_it_given(response):
    verdict = check(response, "42", extraction="lenient", truncated=True)
    assert verdict.passed or verdict.info.get("reason") == "hedged", verdict


@pytest.mark.parametrize("response", [
    "6 times 7 is 42. But first we must",
    "6 times 7 is 42. Now I check it by adding",
    "6 times 7 is 42. Double-checking by adding",
    "6 times 7 is 42. Carry the one",
])
def test_a_last_sentence_that_stops_without_stating_anything_is_reasoning_still_going(response):
    assert ends_mid_sentence(response)
    verdict = lenient(response)
    assert not verdict.passed and verdict.info["cut"] == "mid-sentence", verdict


@pytest.mark.parametrize("response", [
    "6 times 7 is 42. Therefore, Tom has forty-two apples",       # the last sentence states the value
    "So the total is forty two",                                  # one sentence: read as it is
    "65 + 98 = 163.\n\nIn this case, it's a common example of how a simple operation can have a complex",  # commentary after it
])
def test_a_last_sentence_that_states_or_describes_is_not_cut(response):
    assert not ends_mid_sentence(response)


def test_the_verdict_says_the_answer_was_left_open():
    verdict = check("The answer is 42. Or maybe", "42")
    assert verdict.status == Status.NO_ANSWER and "left open" in verdict.info["rule"], verdict


@pytest.mark.parametrize("response", ["So the total is 42 or maybe", "So the total is 42, or perhaps"])
def test_a_closing_sentence_that_stops_inside_an_alternative_states_nothing(response):
    assert not lenient(response).passed
    assert lenient("So the total is 42").passed
