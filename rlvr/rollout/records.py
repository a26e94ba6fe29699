"""What a batch of completions says and how it is written down, shared by training (samples.jsonl,
its warnings) and evaluation (predictions.jsonl, report warnings): the rollout side owns it, so
neither imports the other for it."""

from __future__ import annotations

from typing import Any

from rlvr.rollout.base import Completion

EMPTY_ALARM = 0.5
"""Share of empty completions above which a report says, loudly, that the model is not answering."""


def empty_warning(rate: float, style: str, whitespace_rate: float = 0.0) -> str | None:
    """What to say when most completions are empty (``rate``: nothing, or only whitespace; ``whitespace_rate``: the
    share that is whitespace, not nothing): a chat model given a raw prompt ends its turn at once; a model writing
    spaces or newlines did not end it."""
    if rate <= EMPTY_ALARM:
        return None
    if whitespace_rate >= rate / 2:
        return (f"{rate:.0%} of completions are empty ({whitespace_rate:.0%} of all completions only whitespace: the model wrote "
                "spaces or newlines, not an answer): check the rendered prompt in the report, prompt.system / prompt.instruction "
                "and the sampling settings")
    hint = ("the prompts were raw text: a chat model needs its chat template (prompt.format=chat)" if style == "raw" else
            "check the rendered prompt in the report and prompt.system / prompt.instruction")
    return f"{rate:.0%} of completions are empty (the model ended its turn at once): {hint}"


def whitespace_share(completions: list[Completion]) -> float:
    """Share of ``completions`` that hold text, all of it whitespace."""
    return sum(bool(c.text) and not c.text.strip() for c in completions) / max(len(completions), 1)


def prediction_fields(completion: Completion) -> dict[str, Any]:
    """Extra fields of a ``predictions.jsonl`` or ``samples.jsonl`` sample: the episode turn by turn."""
    return {"episode": completion.episode.to_dict()} if completion.episode is not None else {}
