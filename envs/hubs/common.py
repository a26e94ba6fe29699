"""What every imported hub environment shares: its reward is the hub's own, and rlvr decides only
whether that reward counts as a pass and how to self-check it.

- ``pass_reward``: the reward at or above which a verdict is ``passed`` (hubs reward on their own
  scales: SkyRL's AIME environment gives +1 / -1, verifiers' rewards are weighted sums).
- ``gold``: a template for the gold completion, filled with the problem's answer fields
  (``"#### {ground_truth}"`` for SkyRL's GSM8K environment): hubs publish an answer, not a
  completion in the format their reward reads. Without it, ``rlvr envs check`` skips the gold check.
- Wrong completions (``rlvr envs check``): the gold template filled with each answer field perturbed
  (a number moved by one, a text changed), which must not pass.
"""

from __future__ import annotations

import re
import string
from typing import Any

from envs.base import Environment
from envs.types import Problem, Verdict

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names in ``template``."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def perturbed(value: Any) -> str:
    """``value`` made wrong but plausible: its last number moved by one, else the text changed."""
    text = str(value)
    numbers = list(_NUMBER.finditer(text))
    if numbers:
        last = numbers[-1]
        number = last.group()
        moved = str(int(number) + 1) if "." not in number else f"{float(number) + 1:g}"
        return text[:last.start()] + moved + text[last.end():]
    return (text[::-1] if text[::-1] != text else text + "x") if text else "x"


class HubEnvironment(Environment):
    """Base of the imported environments (`envs.hubs.skyrl_gym`, `envs.hubs.verifiers`, ...):
    subclasses implement `hub_reward` and name the problem's answer fields in `answer_fields`.

    Args:
        pass_reward: The reward at or above which a verdict passes.
        gold: Template of the gold completion over the problem's answer fields, or None.
    """

    hub = "the hub"

    def reward_semantics(self) -> str:
        """What the rewards mean (`rlvr envs check` prints it): the hub's own, unchanged."""
        return (f"{self.hub}'s own rewards for every completion, empty and malformed ones included (rlvr adds no reward of its "
                f"own and scores no reply before the hub does); passed at reward >= {self.pass_reward:g}")

    def __init__(self, pass_reward: float = 1.0, gold: str | None = None):
        if gold is not None and not isinstance(gold, str):
            raise ValueError(f"gold must be a template string like '#### {{ground_truth}}', got {type(gold).__name__}")
        self.pass_reward = float(pass_reward)
        self.gold = gold

    def answer_fields(self, problem: Problem) -> dict[str, Any]:
        """The problem's fields a gold template may name (its answer, ground truth...)."""
        return {}

    def verdict(self, reward: float, text: str, **info: Any) -> Verdict:
        """The verdict on ``text`` for the hub's ``reward``."""
        return Verdict(float(reward), float(reward) >= self.pass_reward, extracted=text[-200:] if text else None, info=info)

    def gold_completion(self, problem: Problem) -> str | None:
        if self.gold is None:
            return None
        fields = self.answer_fields(problem)
        missing = [f for f in template_fields(self.gold) if f not in fields]
        if missing:
            raise ValueError(f"gold template {self.gold!r} names {', '.join(missing)}, which problem {problem.id} does not have "
                             f"(its fields: {', '.join(sorted(fields)) or 'none'})")
        return self.gold.format(**fields)

    def wrong_completions(self, problem: Problem) -> list[str]:
        if self.gold is None:
            return []
        fields = self.answer_fields(problem)
        out = []
        for name in dict.fromkeys(template_fields(self.gold)):
            if name in fields:
                wrong = self.gold.format(**{**fields, name: perturbed(fields[name])})
                if wrong != self.gold.format(**fields):
                    out.append(wrong)
        return out

    def verify(self, problem: Problem, completion: str) -> Verdict:  # pragma: no cover - subclasses
        raise NotImplementedError


def text_prompt(messages: list[dict[str, Any]]) -> str | list[dict[str, str]]:
    """A hub's chat prompt as an rlvr prompt: a lone user message is its text (a chat model sees it
    as the user turn either way, and a base model sees the text itself), anything else the messages."""
    cleaned = [{"role": str(m.get("role", "user")), "content": content_text(m.get("content"))} for m in messages]
    if len(cleaned) == 1 and cleaned[0]["role"] == "user":
        return cleaned[0]["content"]
    return cleaned


def content_text(content: Any) -> str:
    """The text of a chat message's content (a string, or a list of parts with ``text``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return str(content)
