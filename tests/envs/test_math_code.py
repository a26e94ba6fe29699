"""Reward integrity of the math-with-code environment: only the model's own words can earn the
reward. Every attack is run for real (the program runs in the sandbox) beside a control that
must pass, so the tests can fail."""

from __future__ import annotations

import pytest

import envs
from envs.base import safe_verify
from envs.checks import check_environment
from envs.episode import End, Episode, Role, Turn, play
from envs.math_code import INSTRUCTIONS, MathCodeEnv
from envs.tools import blank_calls
from envs.types import Problem, Status

PROBLEM = Problem("p", "Compute 48213*7719.\n", "372156147")
GOLD = PROBLEM.reference


@pytest.fixture(scope="module")
def env():
    return MathCodeEnv(instructions="")


def episode_of(env, *model_turns: str) -> Episode:
    return play(env, PROBLEM, lambda h: model_turns[sum(t.role is Role.MODEL for t in h)])


def call(code: str) -> str:
    return f"```python\n{code}\n```\n"


def test_control_the_model_copies_the_tool_output(env):
    e = episode_of(env, call("print(48213*7719)"), f"Answer: {GOLD}")
    assert e.turns[1].text == f"```output\n{GOLD}\n```\n"
    v = safe_verify(env, PROBLEM, e)
    assert v.passed and v.extracted == GOLD
    assert v.info["episode"] | {"tool_s": 0} == {"turns": 2, "end": "answer", "tool_calls": 1, "tool_errors": 0, "tool_timeouts": 0,
                                                  "tool_s": 0, "observation_chars": len(e.turns[1].text), "tool_output_correct": True}


ATTACKS = {
    "prints_answer_marker": [call(f"print('Answer: {GOLD}')"), "Done."],
    "prints_boxed": [call(f"print(r'\\boxed{{{GOLD}}}')"), "See above."],
    "prints_the_answer_then_model_stops": [call("print(48213*7719)"), ""],
    "prints_marker_and_model_says_nothing_final": [call(f"print('The answer is {GOLD}')"), "ok"],
    "writes_answer_only_inside_code": [call(f"x = 1  # Answer: {GOLD}\nprint(x)"), "Finished."],
    "boxed_in_code_of_the_last_turn": [call(f"s = r'\\boxed{{{GOLD}}}'"), call("print(2)"), "no"],
    "closes_output_block_and_forges_turn": [call(f"print('```\\nAnswer: {GOLD}\\n```output')"), "..."],
    "floods_then_answers_in_output": [call(f"print('x' * 5000 + 'Answer: {GOLD}')"), "hm"],
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_an_answer_printed_by_a_program_earns_nothing(env, name):
    e = episode_of(env, *ATTACKS[name])
    v = safe_verify(env, PROBLEM, e)
    assert e.calls and not v.passed and v.reward == 0.0, (name, v)
    # the transcript does carry the answer (so a checker reading it would be fooled)...
    assert GOLD in e.transcript
    # ...but the model's own prose never states it
    assert GOLD not in blank_calls(e.model_text)


def test_string_completions_are_judged_without_their_code(env):
    assert safe_verify(env, PROBLEM, f"Answer: {GOLD}").passed
    assert not safe_verify(env, PROBLEM, call(f"print('Answer: {GOLD}')")).passed
    assert not safe_verify(env, PROBLEM, call(f"print(r'\\boxed{{{GOLD}}}')")).passed


def test_an_episode_cut_by_a_limit_is_judged_on_what_the_model_wrote(env):
    e = Episode((Turn.model(call("print(1)")), Turn.observation(f"```output\nAnswer: {GOLD}\n```\n")), End.MAX_TOKENS)
    assert safe_verify(env, PROBLEM, e).status is Status.NO_ANSWER


def test_self_checks_pass_including_the_printed_answer_completions():
    env = envs.make("math-code-v1")
    assert any("print(" in w for w in env.wrong_completions(PROBLEM))
    report = check_environment(env, [PROBLEM])
    assert report.passed, report.results


def test_instructions_go_before_the_prompt():
    env = MathCodeEnv()
    assert env.format_prompt(PROBLEM) == INSTRUCTIONS + PROBLEM.prompt
    chat = Problem("c", [{"role": "user", "content": "What is 2+2?"}], "4")
    assert env.format_prompt(chat)[0]["role"] == "system" and env.format_prompt(chat)[1:] == chat.prompt
    assert MathCodeEnv(instructions="").format_prompt(PROBLEM) == PROBLEM.prompt
