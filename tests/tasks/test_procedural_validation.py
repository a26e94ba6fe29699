"""A procedural task that lists no validation split (a plugin's, say) gets one: generated from its
own hash-seeded items, held out, and avoided by the training stream, so a config that evaluates on
``validation`` works with it."""

from __future__ import annotations

import random

from envs.types import Problem
from tasks.procedural import ProceduralTask


class Pairs(ProceduralTask):
    """Two-digit additions: a small item space, so that collisions would show."""

    env_id = "math-v1"
    split_sizes = {"train": None, "test": 50}

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:
        a, b = rng.randint(10, 40), rng.randint(10, 40)
        return Problem(f"{split}/{index}", f"Compute {a}+{b}.", str(a + b))


def test_a_task_without_validation_gets_a_held_out_one_that_training_avoids():
    task = Pairs()
    task.id = "pairs-v1"
    assert task.splits == ("train", "test", "validation") and task.heldout_splits == ("test", "validation")
    validation = task.problems("validation")
    assert len(validation) == Pairs.validation_size
    held = {task.canonical_question(p) for p in [*validation, *task.problems("test")]}
    stream = task.stream("train")
    assert not any(task.canonical_question(next(stream)) in held for _ in range(400))
    assert not {task.canonical_question(p) for p in validation} & {task.canonical_question(p) for p in task.problems("test")}
    again = Pairs()
    again.id = "pairs-v1"
    assert [p.prompt for p in again.problems("validation")] == [p.prompt for p in validation]  # hash-seeded: the same everywhere
    assert Pairs.split_sizes == {"train": None, "test": 50}  # the class is untouched: the split is the instance's
