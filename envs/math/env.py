"""The ``math`` environment: final-answer extraction plus exact comparison."""

from __future__ import annotations

from envs.base import Environment
from envs.math.compare import answers_equal, as_rational
from envs.math.extract import extract_answer
from envs.types import Problem, Verdict


def check(response: str, gold: str, *, strict: bool = True) -> Verdict:
    """Judge a model response against a gold answer.

    Returns a `Verdict` with reward 1.0 when the extracted answer equals ``gold``, status
    ``no_answer`` when no answer can be extracted.
    """
    found = extract_answer(response, strict=strict)
    if found is None:
        return Verdict.no_answer()
    ok = answers_equal(found.answer, str(gold))
    return Verdict(reward=float(ok), passed=ok, extracted=found.answer, info={"method": found.method, "span": [found.start, found.end]})


class MathEnv(Environment):
    """Math answers: the last boxed or "Answer:" value, compared exactly with the reference.

    Args:
        strict: Without an explicit answer marker, a completion has no answer (default). Set
            False to fall back to the last number in the text.
    """

    def __init__(self, strict: bool = True):
        self.strict = strict

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return check(completion, str(problem.reference), strict=self.strict)

    def gold_completion(self, problem: Problem) -> str:
        return problem.metadata.get("solution") or f"Answer: {problem.reference}"

    def wrong_completions(self, problem: Problem) -> list[str]:
        gold = str(problem.reference)
        value = as_rational(gold)
        wrong = f"{value + 1}" if value is not None else gold + "0"
        return [f"Answer: {wrong}", "", "I am not sure."]

    def examples(self) -> list[Problem]:
        return [
            Problem("ex/0", "What is 6*7?", "42"),
            Problem("ex/1", "Half of 3?", "3/2"),
            Problem("ex/2", "Name the set of primes below 4.", "\\{2,3\\}"),
        ]
