"""An rlvr environment as TRL's reward function: both completion formats, errors and hangs
surfaced as TRL's "no reward" (None) and counted, the dataset adapter, and a few real steps of
TRL's GRPOTrainer and RLOOTrainer on the embedded model rewarded by rlvr's verifier."""

from __future__ import annotations

import json
import math

import pytest

import tasks
from envs.math.env import MathEnv
from envs.testing import FaultyEnv, FlakyEnv
from envs.types import Problem
from rlvr.interop.trl import PROBLEM_COLUMN, RewardFunction, completion_text, problem_to_column, trl_dataset


def test_completion_text_reads_plain_and_chat_completions():
    assert completion_text("Answer: 4") == "Answer: 4"
    assert completion_text([{"role": "assistant", "content": "Answer: 4"}]) == "Answer: 4"
    # a tool turn between two assistant turns is not the model's text
    turns = [{"role": "assistant", "content": "call"}, {"role": "tool", "content": "Answer: 9"}, {"role": "assistant", "content": "Answer: 4"}]
    assert completion_text(turns) == "call\nAnswer: 4"
    with pytest.raises(TypeError, match="string or a list of chat messages"):
        completion_text(42)


def test_errors_and_hangs_are_no_reward_counted_and_logged():
    problem = problem_to_column(Problem("p/0", "say ok", "ok"))
    completions = ["ok", "boom", "hang", "nope", [{"role": "assistant", "content": "ok"}]]
    logged: dict[str, list[float]] = {}
    extra: dict[str, list] = {}
    reward = RewardFunction(FaultyEnv(hang_s=120), workers=2, kind="process", timeout_s=2.0)
    try:
        with pytest.warns(RuntimeWarning, match=r"1 verifier error\(s\) and 1 timeout\(s\) in a batch of 5"):
            out = reward(prompts=["say ok"] * 5, completions=completions, **{PROBLEM_COLUMN: [problem] * 5},
                         log_metric=lambda k, v: logged.setdefault(k, []).append(v), log_extra=lambda k, v: extra.setdefault(k, []).extend(v))
    finally:
        reward.close()
    assert out == [1.0, None, None, 0.0, 1.0]  # the raise and the hang are not wrong answers
    c = reward.counts
    assert (c.verified, c.passed, c.errors, c.timeouts) == (5, 2, 1, 1)
    assert logged == {"rlvr/verify_errors": [1.0], "rlvr/verify_timeouts": [1.0], "rlvr/passed": [0.4]}
    assert extra["rlvr_status"] == ["ok", "error", "timeout", "ok", "ok"]
    assert reward.__name__ == "rlvr:FaultyEnv"

    zero = RewardFunction(FaultyEnv(), workers=1, kind="thread", on_failure="zero")
    with pytest.warns(RuntimeWarning, match="verifier exploded"):
        assert zero(prompts=["x"] * 2, completions=["boom", "ok"], **{PROBLEM_COLUMN: [problem] * 2}) == [0.0, 1.0]
    with pytest.raises(ValueError, match=PROBLEM_COLUMN):
        zero(prompts=["x"], completions=["ok"])
    with pytest.raises(ValueError, match="on_failure"):
        RewardFunction(FaultyEnv(), on_failure="nan")


def test_dataset_rows_carry_the_prompt_and_the_problem():
    task = tasks.make("arithmetic-v1")
    rows = trl_dataset(task, "test", limit=4)
    assert rows.column_names == ["prompt", PROBLEM_COLUMN] and len(rows) == 4
    for row, p in zip(rows, task.problems("test", limit=4)):
        assert row["prompt"] == task.env.format_prompt(p)
        assert Problem.from_dict(json.loads(row[PROBLEM_COLUMN])) == p
    chat = trl_dataset("arithmetic-v1", "test", limit=2, conversational=True)
    assert chat[0]["prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]
    # an unbounded split gives rlvr's own training stream, in order
    stream = task.stream("train", seed=3)
    assert [json.loads(r[PROBLEM_COLUMN])["id"] for r in trl_dataset(task, "train", limit=5, seed=3)] == [next(stream).id for _ in range(5)]
    with pytest.raises(tasks.TaskError, match="unbounded"):
        trl_dataset(task, "train")


class RecordingReward(RewardFunction):
    """Keeps what TRL passed and what it got back, to check the trainer's logs against."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list, list, list]] = []

    def __call__(self, prompts, completions, **kwargs):
        out = super().__call__(prompts, completions, **kwargs)
        self.calls.append((list(completions), list(kwargs[PROBLEM_COLUMN]), out))
        return out


@pytest.mark.slow
@pytest.mark.parametrize("trainer_name", ["GRPO", "RLOO"])
def test_trl_trainers_train_on_the_embedded_model_with_rlvr_rewards(trainer_name, sft_base, tmp_path):
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer

    steps, prompts_per_step, group = 3, 4, 4
    task = tasks.make("arithmetic-v1", direct_frac=0.5)
    data = trl_dataset(task, "train", limit=steps * prompts_per_step)
    # math-v1, failing every 5th verification in each worker: real rewards and real failures
    reward = RecordingReward(FlakyEnv("math-v1", raise_every=5), workers=2, timeout_s=30)
    args = getattr(trl, f"{trainer_name}Config")(
        output_dir=str(tmp_path / "trl"), max_steps=steps, seed=0, use_cpu=True, bf16=False,
        per_device_train_batch_size=prompts_per_step * group, gradient_accumulation_steps=1, num_generations=group,
        max_completion_length=48, temperature=1.0, learning_rate=1e-4, beta=0.04, shuffle_dataset=False,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
    )
    trainer = getattr(trl, f"{trainer_name}Trainer")(model=AutoModelForCausalLM.from_pretrained(sft_base), reward_funcs=reward, args=args,
                              train_dataset=data, processing_class=AutoTokenizer.from_pretrained(sft_base))
    try:
        trainer.train()
    finally:
        reward.close()

    logs = [r for r in trainer.state.log_history if f"rewards/{reward.__name__}/mean" in r]
    assert len(logs) == steps and len(reward.calls) == steps
    assert reward.counts.verified == steps * prompts_per_step * group
    assert reward.counts.errors > 0 and reward.counts.timeouts == 0
    assert sum(r["rlvr/verify_errors"] for r in logs) == reward.counts.errors
    env = MathEnv()
    for log, (completions, problems, out) in zip(logs, reward.calls):
        # every reward TRL used is math-v1's verdict on that completion; failures were left out, not zeroed
        assert all(isinstance(c, str) for c in completions)
        scored = [r for r in out if r is not None]
        for c, p, r in zip(completions, problems, out):
            if r is not None:
                assert r == env.verify(Problem.from_dict(json.loads(p)), c).reward
        assert math.isclose(log[f"rewards/{reward.__name__}/mean"], sum(scored) / len(scored), rel_tol=1e-5)
    rewards = [r for _, _, out in reward.calls for r in out if r is not None]
    assert 0 < sum(rewards) < len(rewards)  # the warmed-up model solves some problems, not all
