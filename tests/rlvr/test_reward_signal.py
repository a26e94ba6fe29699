"""The format-only control (``verify.reward=format``): 1 for a well-formed answer whether right or
not, never for a refused restatement, an unparsable line or a missing answer; correctness is kept
in ``passed`` so training accuracy stays honest."""

from __future__ import annotations

import pytest

from envs.math.env import MathEnv
from envs.types import Problem, Status, Verdict
from rlvr import UserError
from rlvr.config import ConfigError, load_config
from rlvr.train import TrainConfig
from rlvr.rollout.reward_signal import REWARD_SIGNALS, format_only, reward_signal, well_formed

ENV = MathEnv()
PROBLEM = Problem(id="t/0", prompt="Compute 68*8.", reference="544")


@pytest.mark.parametrize("completion, reward, passed", [
    ("Answer: 544", 1.0, True),
    ("Answer: 545", 1.0, False),          # wrong, but a well-formed answer: the control rewards it
    ("The answer is \\boxed{12}", 1.0, False),
    ("Answer: 68*8", 0.0, False),         # the question's own expression is refused, so not well formed
    ("I do not know.", 0.0, False),       # no answer
    ("", 0.0, False),
])
def test_format_only_rewards_a_well_formed_answer_right_or_wrong(completion, reward, passed):
    verdict = format_only(ENV.verify(PROBLEM, completion))
    assert (verdict.reward, verdict.passed) == (reward, passed)
    assert verdict.steps == ()


def test_correctness_is_the_verdict_itself_and_failures_keep_their_status():
    v = ENV.verify(PROBLEM, "Answer: 545")
    assert REWARD_SIGNALS.get("correctness")(v) is v
    failed = Verdict.error("verifier crashed")
    assert format_only(failed) is failed and not well_formed(failed)
    assert format_only(Verdict(0.0, False, Status.OK, extracted="x", info={"parse_error": "bad"})).reward == 0.0


def test_an_unknown_signal_names_the_key():
    with pytest.raises(UserError, match=r"verify.reward='accuracy'.*correctness, format"):
        reward_signal("accuracy")


def test_yaml_off_reads_as_the_off_choice():
    cfg = load_config(TrainConfig, "quickstart", ["algo.kl_mode=off"])
    assert cfg.algo.kl.mode == "off"
    with pytest.raises(ConfigError, match="kl_mode"):
        load_config(TrainConfig, "quickstart", ["algo.kl_mode=on"])
