"""Cut completions: what lenient extraction credits in a response that did not finish.

A response is **cut** when generation stopped it at its token budget (the caller says so:
`envs.types.CutText`, ``check(truncated=True)``) or when its text stops in the middle of a sentence
(`ends_mid_sentence`: on a connecting word, an operator, an open bracket or formula). Its last
sentences are then reasoning still going, not a conclusion: "6 times 7 is 42. So the" holds the
gold 42 only as a step. Lenient extraction reads a closing sentence for its value, so on a cut
response it would credit whatever value the reasoning last reached. There it credits only an answer
the response committed to with a marker before the cut (`committed_answer`):

- a closed ``\\boxed{...}``;
- a marker answer ("The answer is 42", "Answer: 42", "#### 42") whose sentence ended before the
  cut: a sentence end or a line break follows it ("The answer is 42. Let me check: 6 ×" commits to
  42; "The answer is 4" at the very end of a cut response may be the start of 45 and commits to
  nothing).

Strict extraction reads only explicit answers anyway; on a response generation truncated it too
credits only a committed one (a cut "Answer: 4" may be the start of 45).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envs.math.extract import Extraction

_LAST_WORD = re.compile(r"([A-Za-z']+)\W*$")
_DANGLING = frozenset("""and or but nor so to of the a an is are was were be been being by with for from in on at as than then
plus minus times over divided multiplied equals equal gives give get gets got which that because since if when while where
we i it its this these those their our your his her my per into onto under let let's also thus hence therefore next
add subtract multiply divide compute calculate find obtain""".split())
"""A sentence that ends on one of these words is unfinished ("So the", "We add 5 to", "It equals")."""
_OPEN_END = re.compile(r"(?:[-+*/=×÷^<>≤≥,:;(\[{\\]|\\(?:frac|sqrt|cdot|times)|\\boxed\s*)\s*$")
_COMMITTED = re.compile(r"[.!?][\s\"'”’)\]*_]|\n")
"""What ends a marker answer's sentence before the cut: a sentence end followed by something (a
last ``.`` of a cut response may be a decimal point: "3." of "3.5"), or a line break."""


def ends_mid_sentence(text: str) -> bool:
    """Whether ``text`` stops inside a sentence: on a word that needs more after it, on an operator
    or comma, or with a brace left open (a ``$`` is not counted: it may be currency). A response that ends on a value
    ("so the total is 42") ends a sentence, with or without its full stop."""
    stripped = text.rstrip()
    if not stripped:
        return False
    if _OPEN_END.search(stripped):
        return True
    if _unclosed_brace(stripped[stripped.rfind("\n") + 1:]):  # "\frac{1}{" or "\boxed{4"
        return True
    m = _LAST_WORD.search(stripped)
    return bool(m) and stripped.endswith(m.group(1)) and m.group(1).lower() in _DANGLING


def _unclosed_brace(line: str) -> bool:
    depth = 0
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        i += 1
    return depth > 0


def cut_reason(text: str, truncated: bool) -> str | None:
    """Why ``text`` counts as cut (``"truncated"``, ``"mid-sentence"``), or None when it finished."""
    if truncated:
        return "truncated"
    return "mid-sentence" if ends_mid_sentence(text) else None


def committed_answer(text: str, found: Extraction | None) -> Extraction | None:
    """``found`` (the last boxed or marker answer of a cut response) when the response committed to
    it before the cut, else None (see the module docstring)."""
    if found is None:
        return None
    if found.method == "boxed":
        return found
    if found.method == "marker" and _COMMITTED.search(text, found.end):
        return found
    return None


__all__ = ["committed_answer", "cut_reason", "ends_mid_sentence"]
