"""reasoning-gym generators as rlvr tasks: hash-seeded disjoint splits (where reasoning-gym's own
seed + index scheme overlaps), config validation, the generator's scorer as an environment, the
sum-chain task's worked demonstrations and frozen test split, and `rlvr envs check` on both."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Optional

import pytest
import reasoning_gym
from reasoning_gym.factory import DATASETS, ProceduralDataset, register_dataset

import tasks
from envs.reasoning_gym import ReasoningGymEnv, extract
from envs.types import Status
from rlvr.cli import main
from tasks.base import TaskError
from tasks.leakage import check_leakage
from tasks.reasoning_gym import running_totals


def test_reasoning_gyms_own_seeds_overlap_where_hashed_splits_do_not():
    # the naive wrapper: "train" = seed 0, "test" = seed 1, items at Random(seed + index)
    naive_train = reasoning_gym.create_dataset("chain_sum", seed=0, size=200)
    naive_test = reasoning_gym.create_dataset("chain_sum", seed=1, size=200)
    shared = {naive_train[i]["question"] for i in range(200)} & {naive_test[i]["question"] for i in range(200)}
    assert len(shared) >= 190  # test item i is train item i + 1
    task = tasks.make("reasoning-gym-v1", dataset="chain_sum", min_digits=2, max_digits=3, max_terms=4)
    report = check_leakage(task, train_limit=2000)
    assert report.clean, report.summary()
    train = [task.get("train", i).prompt for i in range(200)]
    test = [p.prompt for p in task.problems("test", limit=200)]
    assert not set(train) & set(test) and len(set(train)) >= 195
    # items are pure functions of (task, config, split, index)
    again = tasks.make("reasoning-gym-v1", dataset="chain_sum", min_digits=2, max_digits=3, max_terms=4)
    assert [again.get("train", i).prompt for i in range(200)] == train
    other = tasks.make("reasoning-gym-v1", dataset="chain_sum", min_digits=2, max_digits=3, max_terms=5)
    assert sum(a == b for a, b in zip(train, (other.get("train", i).prompt for i in range(200)))) < 5


def test_config_errors_name_the_key():
    with pytest.raises(TaskError, match=r"unknown config key\(s\) \['max_term'\]"):
        tasks.make("reasoning-gym-v1", dataset="chain_sum", max_term=3)
    with pytest.raises(TaskError, match="set per item by the wrapper"):
        tasks.make("reasoning-gym-v1", dataset="chain_sum", seed=3)
    with pytest.raises(TaskError, match="no generator 'chain_summ'; did you mean chain_sum"):
        tasks.make("reasoning-gym-v1", dataset="chain_summ")
    with pytest.raises(TaskError, match="invalid config"):
        tasks.make("reasoning-gym-v1", dataset="chain_sum", min_terms=5, max_terms=2)
    with pytest.raises(TaskError, match="always wraps 'basic_arithmetic'"):
        tasks.make("reasoning-gym/sum-chain-v1", dataset="spell_backward")
    with pytest.raises(TaskError, match="operators must be"):
        tasks.make("reasoning-gym/sum-chain-v1", operators=["+", "*"])


def test_the_generators_scorer_is_the_environment():
    task = tasks.make("reasoning-gym-v1")  # number_sorting by default
    env = task.env
    assert isinstance(env, ReasoningGymEnv) and task.env_id == "reasoning-gym-v1"
    p = task.get("train", 0)
    gold = json.loads(p.reference.replace("'", '"'))
    assert env.verify(p, f"Sorted:\nAnswer: {p.reference}").passed
    # the scorer, not string equality, decides: the same list written with double quotes passes
    assert env.verify(p, f"<answer>{json.dumps(gold)}</answer>").passed
    assert not env.verify(p, f"Answer: {json.dumps(gold[::-1])}").passed
    assert env.verify(p, p.reference).status == Status.NO_ANSWER  # strict: no marker, no answer
    assert extract("Answer: 1\n<answer> a, b </answer>\nAnswer: 2") == "a, b"


@dataclass
class NanConfig:
    seed: Optional[int] = None
    size: int = 500


class NanDataset(ProceduralDataset):
    """A generator whose scorer misbehaves: its verdict must be an error, not a reward."""

    def __init__(self, config: NanConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def __getitem__(self, idx: int) -> dict:
        rng = random.Random(self.seed + idx)
        n = rng.randint(0, 10**6)
        return {"question": f"Echo {n}.", "answer": str(n), "metadata": {"n": n}}

    def score_answer(self, answer, entry) -> float:
        return math.nan


def test_a_scorer_that_returns_nan_is_an_error_verdict():
    if "rlvr_test_nan" not in DATASETS:
        register_dataset("rlvr_test_nan", NanDataset, NanConfig)
    task = tasks.make("reasoning-gym-v1", dataset="rlvr_test_nan")
    v = task.env.verify(task.get("train", 0), "Answer: 1")
    assert v.status == Status.ERROR and "expected a number in [0, 1]" in v.info["error"]


def test_sum_chain_demonstrations_are_true_running_totals():
    rng = random.Random(0)
    for _ in range(500):
        terms = [rng.randint(0, 999) for _ in range(rng.randint(2, 6))]
        ops = [rng.choice("+-") for _ in terms[1:]]
        expression = " ".join([str(terms[0])] + [f"{o} {t}" for o, t in zip(ops, terms[1:])])
        lines = running_totals(expression)
        assert len(lines) == len(ops) and int(lines[-1].split("=")[1]) == eval(expression)  # noqa: S307 (our own digits)
        for line in lines:
            left, right = line.split("=")
            assert eval(left) == int(right)  # noqa: S307
    assert running_totals("7 + 2 - 5") == running_totals("7+2-5") == ["7+2=9", "9-5=4"]
    with pytest.raises(ValueError, match="not a chain"):
        running_totals("7 * 2 - 5")
    task = tasks.make("reasoning-gym/sum-chain-v1", direct_frac=0.5)
    demos = [task.solution(p) for p in task.problems("validation")]
    assert 0.35 < sum(d.startswith("Answer:") for d in demos) / len(demos) < 0.65
    for p, d in zip(task.problems("validation"), demos):
        assert task.env.verify(p, d).passed


def test_sum_chain_test_split_is_frozen_and_regenerates_identically():
    task = tasks.make("reasoning-gym/sum-chain-v1")
    frozen = task.problems("test")
    assert len(frozen) == 500 and task.checksum("test") == task.frozen["test"]
    assert [task._generate_fresh("test", i) for i in range(500)] == frozen
    # a demonstration setting does not change the items; a generator setting does (and unfreezes)
    assert tasks.make("reasoning-gym/sum-chain-v1", direct_frac=0.5).problems("test") == frozen
    assert tasks.make("reasoning-gym/sum-chain-v1", max_terms=4).problems("test") != frozen


def test_envs_check_passes_on_both_kinds(capsys):
    assert main(["envs", "check", "reasoning-gym-v1", "-n", "10"]) == 0
    out = capsys.readouterr().out
    assert "[PASS] gold passes: 10/10 ok" in out and "[PASS] perturbed answers fail" in out and "[PASS] no train/test leakage" in out
    assert main(["envs", "check", "math-v1", "--task", "reasoning-gym/sum-chain-v1", "-n", "10"]) == 0
    out = capsys.readouterr().out
    assert "[PASS] no train/test leakage: no overlap between 20000 train items and test (500), validation (200)" in out
    assert "all checks passed" in out
