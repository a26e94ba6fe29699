"""The episode contract: registration, limits, failures of the step function, verdicts from the
model's own turns only, and process-reward spans on the transcript."""

from __future__ import annotations

import pickle
import threading

import pytest

import envs
from envs.base import safe_verify
from envs.episode import End, Episode, EpisodeLimits, MultiTurnEnvironment, Role, StepResult, StepRunner, Turn, play
from envs.math import check
from envs.pool import VerifierPool
from envs.types import Problem, Status, StepReward, Verdict

PROBLEM = Problem("p/0", "Guess the number (1-100).\n", "42")
RELEASE = threading.Event()  # lets hung steps finish when a test is done with them


class Guess(MultiTurnEnvironment):
    """A checker environment: a turn ending with '?\\n' asks 'is it N?', the checker says higher or
    lower; the final answer is graded by the math checker."""

    stop = ("?\n",)
    limits = EpisodeLimits(max_turns=5, max_tokens=200, max_tool_s=5.0, step_timeout_s=5.0)

    def step(self, problem, turns):
        asked = int(turns[-1].text.split()[-1].rstrip("?"))
        gold = int(problem.reference)
        hint = "yes" if asked == gold else ("higher" if asked < gold else "lower")
        return StepResult(f"{hint}\n", rewards=(StepReward(0, len(turns[-1].text), float(asked == gold), "guess"),))

    def verify(self, problem, completion):
        return check(completion, problem.reference)


class Broken(Guess):
    def step(self, problem, turns):
        raise RuntimeError("the checker crashed")


class Hangs(Guess):
    limits = EpisodeLimits(max_turns=3, step_timeout_s=0.5)

    def step(self, problem, turns):
        RELEASE.wait(30)
        return StepResult("late\n")


def scripted(*turns: str):
    return lambda history: turns[sum(t.role is Role.MODEL for t in history)]


def test_a_multi_turn_environment_registers_like_any_other():
    envs.register("test/guess-v1", Guess, override=True)
    try:
        env = envs.make("test/guess-v1")
        assert isinstance(env, MultiTurnEnvironment) and env.id == "test/guess-v1"
        assert "test/guess-v1" in envs.ENVS.ids()
    finally:
        envs.ENVS.unregister("test/guess-v1")


def test_episode_alternates_turns_and_is_graded_from_the_models_words():
    env = Guess()
    episode = play(env, PROBLEM, scripted("is it 50?\n", "is it 42?\n", "Answer: 42"))
    assert [t.role for t in episode.turns] == [Role.MODEL, Role.OBSERVATION, Role.MODEL, Role.OBSERVATION, Role.MODEL]
    assert [t.text for t in episode.turns if t.role is Role.OBSERVATION] == ["lower\n", "yes\n"]
    assert episode.end is End.ANSWER and episode.transcript == "is it 50?\nlower\nis it 42?\nyes\nAnswer: 42"
    assert episode.model_text == "is it 50?\nis it 42?\nAnswer: 42"
    verdict = safe_verify(env, PROBLEM, episode)
    assert verdict.passed and verdict.info["episode"]["turns"] == 3
    # step rewards sit on the turns they judge, in transcript offsets
    guesses = [s for s in verdict.steps if s.label == "guess"]
    assert [(episode.transcript[s.start:s.end], s.reward) for s in guesses] == [("is it 50?\n", 0.0), ("is it 42?\n", 1.0)]


def test_an_answer_in_an_observation_earns_nothing():
    class Leaky(Guess):
        def step(self, problem, turns):
            return StepResult(f"Answer: {problem.reference}\n\\boxed{{{problem.reference}}}\n")

    env = Leaky()
    episode = play(env, PROBLEM, scripted("is it 7?\n", "ok"))
    assert "Answer: 42" in episode.transcript
    verdict = safe_verify(env, PROBLEM, episode)
    assert not verdict.passed and verdict.reward == 0.0
    # a single-turn environment handed an episode reads the model's turns only as well
    single = envs.make("math-v1")
    assert not safe_verify(single, PROBLEM, episode).passed
    assert safe_verify(single, PROBLEM, Episode((Turn.model("Answer: 42"),), End.ANSWER)).passed


def test_limits_end_episodes():
    env = Guess()
    always_asking = lambda history: "is it 1?\n"  # noqa: E731
    e = play(env, PROBLEM, always_asking, limits=EpisodeLimits(max_turns=3))
    assert e.end is End.MAX_TURNS and len(e.model_turns) == 3 and len(e.turns) == 5  # no step after the last turn


def test_tool_time_budget_stops_further_calls():
    class Slow(Guess):
        def step(self, problem, turns):
            from envs.episode import ToolCall

            return StepResult("lower\n", calls=(ToolCall("python", "ok", 0.6),))

    e = play(Slow(), PROBLEM, lambda h: "is it 1?\n", limits=EpisodeLimits(max_turns=10, max_tool_s=1.0))
    assert e.end is End.TOOL_TIME and len(e.calls) == 2  # 1.2 s spent after two calls: the third is refused


def test_a_step_that_raises_is_an_error_verdict_and_one_that_hangs_a_timeout():
    e = play(Broken(), PROBLEM, scripted("is it 5?\n"))
    assert e.end is End.STEP_ERROR and "the checker crashed" in e.error
    v = safe_verify(Broken(), PROBLEM, e)
    assert v.status is Status.ERROR and "the checker crashed" in v.info["error"]

    RELEASE.clear()
    e = play(Hangs(), PROBLEM, scripted("is it 5?\n"))
    RELEASE.set()
    assert e.end is End.STEP_TIMEOUT
    assert safe_verify(Hangs(), PROBLEM, e).status is Status.TIMEOUT


def test_step_runner_keeps_going_past_a_hung_step():
    runner = StepRunner(max_workers=8)
    RELEASE.clear()
    try:
        items = [(PROBLEM, (Turn.model("is it 5?\n"),))] * 3
        outcomes = runner.run(Hangs(), items[:1], 0.2) + runner.run(Guess(), items, 5.0)
    finally:
        RELEASE.set()
        runner.close()
    assert outcomes[0].timed_out
    assert [o.result.observation for o in outcomes[1:]] == ["higher\n"] * 3


def test_step_returning_the_wrong_type_is_an_error():
    class Wrong(Guess):
        def step(self, problem, turns):
            return "lower"

    e = play(Wrong(), PROBLEM, scripted("is it 5?\n"))
    assert e.end is End.STEP_ERROR and "expected StepResult" in e.error


def test_answer_text_must_keep_its_length():
    class Shortens(Guess):
        def answer_text(self, episode):
            return episode.model_text[:-1]

    e = play(Shortens(), PROBLEM, scripted("Answer: 42"))
    v = safe_verify(Shortens(), PROBLEM, e)
    assert v.status is Status.ERROR and "length" in v.info["error"]


@pytest.mark.parametrize("returned, shown", [(True, "got bool True"), (None, "got NoneType None"), (0.5, "got float 0.5")])
def test_a_verify_that_returns_no_verdict_is_an_error_naming_what_it_returned(returned, shown):
    class Bare(Guess):
        def verify(self, problem, completion):
            return returned

    e = play(Bare(), PROBLEM, scripted("Answer: 42"))
    for completion in (e, "Answer: 42"):  # an episode and a plain string take the same check
        v = safe_verify(Bare(), PROBLEM, completion)
        assert v.status is Status.ERROR and f"verify must return a Verdict, {shown}" in v.info["error"]


def test_model_offsets_map_onto_the_transcript():
    e = Episode((Turn.model("ab"), Turn.observation("XYZ"), Turn.model("cd")), End.ANSWER)
    assert e.transcript == "abXYZcd" and e.model_text == "abcd"
    assert [e.model_to_transcript(i) for i in range(4)] == [0, 1, 5, 6]
    assert e.model_to_transcript(2, end=True) == 2 and e.model_to_transcript(2) == 5  # a span ending at "b" ends before the observation
    assert e.model_to_transcript(4, end=True) == 7


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_episodes_cross_the_verifier_pool(kind):
    episode = play(Guess(), PROBLEM, scripted("is it 42?\n", "Answer: 42"))
    assert pickle.loads(pickle.dumps(episode)) == episode
    with VerifierPool(envs.make("math-v1"), workers=1, kind=kind) as pool:
        verdicts = pool.verify([PROBLEM, PROBLEM], [episode, "Answer: 41"])
    assert [v.passed for v in verdicts] == [True, False]


def test_limits_are_validated():
    with pytest.raises(ValueError, match="max_turns"):
        EpisodeLimits(max_turns=0)
    with pytest.raises(ValueError, match="step_timeout_s"):
        EpisodeLimits(step_timeout_s=-1)


def test_recorder_refuses_turns_after_the_end():
    from envs.episode import EpisodeRecorder

    r = EpisodeRecorder(EpisodeLimits())
    r.model_turn("done", at_stop=False)
    assert r.done and r.end is End.ANSWER
    with pytest.raises(RuntimeError):
        r.model_turn("more", at_stop=False)
    assert isinstance(r.episode(), Episode) and r.episode().info["step_s"] == 0.0


def test_verdict_of_a_plain_string_is_unchanged_for_multi_turn_envs():
    assert safe_verify(Guess(), PROBLEM, "Answer: 42").passed
    assert isinstance(safe_verify(Guess(), PROBLEM, "Answer: 41"), Verdict)


def test_the_readme_example_registers_and_plays():
    """The worked example of the docs (docs/environments/multi-turn.md) runs as written."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "environments" / "multi-turn.md"
    block = next(b for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S) if "acme/guess-v1" in b)
    try:
        exec(compile(block, str(page), "exec"), {})
        env = envs.make("acme/guess-v1")
        e = play(env, PROBLEM, scripted("is it 50?\n", "is it 40?\n", "is it 42?\n", "Answer: 42"))
        assert [t.text for t in e.turns if t.role is Role.OBSERVATION] == ["lower\n", "higher\n", "yes\n"]
        assert safe_verify(env, PROBLEM, e).passed
        assert not safe_verify(env, PROBLEM, play(env, PROBLEM, scripted("is it 42?\n", "no idea"))).passed
    finally:
        envs.ENVS.unregister("acme/guess-v1")
