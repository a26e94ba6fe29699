"""The ``reasoning-gym`` environment: a reasoning-gym generator's own scorer as the verifier.

Generators whose answers are not mathematical expressions (a reversed word, a sorted list, a
puzzle board) know best what counts as correct, and some accept several answers, so their
``score_answer(answer, entry)`` decides. rlvr adds what the scorer does not do: strict answer
extraction (the last ``<answer>...</answer>``, reasoning-gym's convention, else the last
``Answer:`` line; none → ``no_answer``, never a guess from the whole text) and a check that the
score is a finite number in [0, 1]. Partial credit (some scorers give it) is the reward;
``passed`` means a full score.

A problem carries what the scorer needs in ``metadata["reasoning_gym"]``: the generator's name,
its config and the item's own metadata (see `tasks.reasoning_gym`).
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from envs.base import Environment
from envs.types import Problem, Verdict

_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.S)
_ANSWER_LINE = re.compile(r"(?im)^\s*(?:final\s+)?answer\s*:\s*(.*?)\s*$")


def extract(completion: str) -> str | None:
    """The answer in ``completion``: the last ``<answer>`` tag's content, else the last ``Answer:`` line's rest."""
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return tags[-1].strip()
    lines = _ANSWER_LINE.findall(completion)
    return lines[-1] if lines else None


@lru_cache(maxsize=64)
def _scorer(dataset: str, config_json: str):
    """A generator instance for ``score_answer`` (built once per config; some scorers read it)."""
    try:
        import reasoning_gym
    except ImportError as e:
        raise ImportError(f"reasoning-gym is not installed ({e}); install it with: pip install 'rlvr[reasoning-gym]'") from e

    return reasoning_gym.create_dataset(dataset, seed=0, size=1, **json.loads(config_json))


def entry_of(problem: Problem) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(generator name, generator config, reasoning-gym entry) of a problem made by `tasks.reasoning_gym`."""
    rg = problem.metadata.get("reasoning_gym")
    if not isinstance(rg, dict) or "dataset" not in rg:
        raise ValueError(f"problem {problem.id} has no metadata['reasoning_gym'] (made by a reasoning-gym task?)")
    question = problem.prompt if isinstance(problem.prompt, str) else problem.prompt[-1]["content"]
    entry = {"question": question.rstrip("\n"), "answer": problem.reference, "metadata": rg.get("metadata", {})}
    return rg["dataset"], rg.get("config", {}), entry


def _unit_score(score: Any) -> float | None:
    """``score`` as a float in [0, 1] (numpy numbers included), or None when it is not one."""
    if isinstance(score, bool):
        return None
    try:
        value = float(score)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and 0.0 <= value <= 1.0 else None


class ReasoningGymEnv(Environment):
    """Scores a completion with the reasoning-gym generator's ``score_answer`` (see the module docstring)."""

    def answer_instruction(self, problem: Problem) -> str:
        return 'End your response with a line "Answer: <answer>".'

    def verify(self, problem: Problem, completion: str) -> Verdict:
        dataset, config, entry = entry_of(problem)
        answer = extract(completion)
        if answer is None:
            return Verdict.no_answer(reason="no <answer> tag or Answer: line")
        score = _scorer(dataset, json.dumps(config, sort_keys=True)).score_answer(answer, entry)
        value = _unit_score(score)
        if value is None:
            return Verdict.error(f"{dataset}.score_answer returned {score!r}, expected a number in [0, 1]", extracted=answer)
        return Verdict(value, value >= 1.0, extracted=answer, info={"dataset": dataset})

    def gold_completion(self, problem: Problem) -> str:
        return f"Answer: {problem.reference}"

    def wrong_completions(self, problem: Problem) -> list[str]:
        gold = str(problem.reference)
        wrong = [f"Answer: {gold}{gold}", f"Answer: {gold} x"]
        if gold[::-1] != gold:
            wrong.append(f"Answer: {gold[::-1]}")
        return wrong
