"""Find the final answer in a model's completion.

Markers, from most to least explicit: the last ``\\boxed{...}`` / ``\\fbox{...}`` (the last one
wins: self-corrections are normal in chain-of-thought), then the last "Answer: ...", "the answer
is ...", or "#### ..." line. Strict extraction (the default for rewards) stops there: a completion
without a marker has no answer. Lenient extraction falls back to the last number in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKERS = [
    re.compile(r"(?im)^[ \t]*(?:final\s+)?answer\s*[:：]\s*(?P<ans>.+?)\s*$"),
    re.compile(r"(?i)the\s+(?:final\s+)?answer\s+is\s*[:：]?\s*(?P<ans>[^\n]+?)\s*(?:\.\s*)?$", re.M),
    re.compile(r"(?m)^[ \t]*####\s*(?P<ans>.+?)\s*$"),
]
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


@dataclass(frozen=True)
class Extraction:
    """An extracted answer and where it was found.

    Attributes:
        answer: The answer text (without its marker).
        start: Offset of the answer in the completion.
        end: Offset one past its end.
        method: Which rule found it (``boxed``, ``marker``, ``last_number``).
    """

    answer: str
    start: int
    end: int
    method: str


def _last_boxed(text: str) -> Extraction | None:
    found = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = Extraction(text[m.end(): i - 1].strip(), m.end(), i - 1, "boxed")
    return found


def extract_answer(text: str, *, strict: bool = True) -> Extraction | None:
    """The final answer in ``text``, or None when there is none (see module docstring)."""
    boxed = _last_boxed(text)
    if boxed is not None and boxed.answer:
        return boxed
    best: Extraction | None = None
    for pattern in _MARKERS:
        for m in pattern.finditer(text):
            cand = Extraction(m.group("ans").strip(), m.start("ans"), m.end("ans"), "marker")
            if cand.answer and (best is None or cand.start > best.start):
                best = cand
    if best is not None or strict:
        return best
    numbers = list(_LAST_NUMBER.finditer(text))
    if numbers:
        m = numbers[-1]
        return Extraction(m.group(0), m.start(), m.end(), "last_number")
    return None
