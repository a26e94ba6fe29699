"""What a batch of completions says and how it is written down, shared by training (samples.jsonl,
its warnings) and evaluation (predictions.jsonl, report warnings): the rollout side owns it, so
neither imports the other for it."""

from __future__ import annotations

from typing import Any

from rlvr.rollout.base import Completion

EMPTY_ALARM = 0.5
"""Share of empty completions above which a report says, loudly, that the model is not answering."""


def empty_warning(rate: float, style: str) -> str | None:
    """What to say when most completions are empty: a chat model given a raw prompt ends its turn at once."""
    if rate <= EMPTY_ALARM:
        return None
    hint = ("the prompts were raw text: a chat model needs its chat template (prompt.format=chat)" if style == "raw" else
            "check the rendered prompt in the report and prompt.system / prompt.instruction")
    return f"{rate:.0%} of completions are empty (the model ended its turn at once): {hint}"


def prediction_fields(completion: Completion) -> dict[str, Any]:
    """Extra fields of a ``predictions.jsonl`` or ``samples.jsonl`` sample: the episode turn by turn."""
    return {"episode": completion.episode.to_dict()} if completion.episode is not None else {}
