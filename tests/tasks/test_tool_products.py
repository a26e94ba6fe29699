import pytest

import tasks
from envs.base import safe_verify
from envs.episode import Role, play
from tasks.base import TaskError
from tasks.leakage import check_leakage


def test_items_frozen_split_and_leakage():
    t = tasks.make("tool-products-v1")
    test = t.problems("test")
    assert len(test) == 500 and t.checksum("test") == t.frozen["test"]
    assert [t._generate_fresh("test", i) for i in range(20)] == test[:20]  # the generator still makes the frozen items
    for p in test[:50] + t.problems("validation", limit=50):
        a, b = p.metadata["a"], p.metadata["b"]
        assert 1000 <= a < 10**4 and 1000 <= b < 10**4 and p.reference == str(a * b) and p.prompt == f"Compute {a}*{b}.\n"
    assert check_leakage(t, train_limit=5000).clean
    assert t.env.id == "math-code-v1"


def test_guess_fraction_changes_demonstrations_only():
    plain, mixed = tasks.make("tool-products-v1"), tasks.make("tool-products-v1", guess_frac=0.5)
    assert plain.problems("validation") == mixed.problems("validation") and plain.checksum("test") == mixed.checksum("test")
    demos = [mixed.demonstration(p) for p in mixed.problems("validation")]
    guesses = sum(len(d) == 1 for d in demos)
    assert 70 <= guesses <= 130  # about half of 200
    assert all(len(plain.demonstration(p)) == 3 for p in plain.problems("validation", limit=50))
    with pytest.raises(ValueError, match="guess_frac"):
        tasks.make("tool-products-v1", guess_frac=1.5)
    with pytest.raises(TaskError, match="unknown config"):
        tasks.make("tool-products-v1", digits=3)


def test_demonstrations_replay_through_the_real_tool_and_pass():
    """A demonstration's observation is exactly what the sandboxed tool prints for its call, and
    replaying the demonstration's model turns earns the reward."""
    task = tasks.make("tool-products-v1", guess_frac=0.5)
    env = task.env
    for p in task.problems("validation", limit=12):
        demo = task.demonstration(p)
        model_turns = [t.text for t in demo if t.role is Role.MODEL]
        episode = play(env, p, lambda h: model_turns[sum(t.role is Role.MODEL for t in h)])
        assert episode.turns == tuple(demo)
        verdict = safe_verify(env, p, episode)
        assert verdict.passed, (p.id, verdict)
        assert task.solution(p) == episode.transcript
