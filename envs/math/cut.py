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

A response also **ends mid-sentence** when its last sentence, after a finished one, has no closing
punctuation, states no value and describes nothing with a verb of being ("6 times 7 is 42. Carry
the one", "... Now I check it by adding", "... But first we must"): the step it was writing never
finished, so the value before it is not its conclusion. (Commentary that trails off, "it's a
common example of how", still follows the conclusion: it is left to the other rules.)

In both modes, an answer is **left open** (`left_open`) when the response stops, without closing
punctuation, inside what follows it and that is another answer begun: an alternative or a hedge
("The answer is 42. Or maybe", "It could also be", "However, ... the answer becomes"), a
correction ("Wait, the"), a new answer marker or box ("Alternatively, the answer is", "or maybe
\\boxed{4"), or the answer's own sentence goes on as a condition ("If the answer were
\\boxed{42}, then"). A cut there hides the second value or the condition, so the first is not
credited: a model must not gain by stopping right after it starts to hedge.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from envs.math import commit, prose

if TYPE_CHECKING:
    from envs.math.extract import Extraction

_LAST_WORD = re.compile(r"([A-Za-z']+)\W*$")
_DANGLING = frozenset("""and or but nor so to of the a an is are was were be been being by with for from in on at as than then
plus minus times over divided multiplied equals equal gives give get gets got which that because since if when while where
we i it its this these those their our your his her my per into onto under let let's also thus hence therefore next
add subtract multiply divide compute calculate find obtain must should would could can will shall might may need""".split())
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
    if bool(m) and stripped.endswith(m.group(1)) and m.group(1).lower() in _DANGLING:
        return True
    return _trails_off(stripped)


LAST_SENTENCE_CHARS = 2000
"""The last sentence is looked for in this many final characters (bounds the scan)."""
_SENTENCE_BREAK = re.compile(r"[.!?][\"'”’)\]*_]*\s+|\n")
_STATES = re.compile(r"[\d=$\\<>]")
_DESCRIBES = re.compile(r"(?i)\b(?:is|are|was|were|'s)\b|’s\b")
"""A sentence with a verb of being describes ("In this case, it's a common example of how a simple
operation can have a complex"): commentary after the conclusion, not a step still being written."""


def _trails_off(stripped: str) -> bool:
    """A last sentence, after a finished one, that stops on a word without stating a value ("6
    times 7 is 42. Carry the one"): a step being written, not a conclusion."""
    if not stripped[-1].isalpha():
        return False
    window = stripped[-LAST_SENTENCE_CHARS:]
    breaks = list(_SENTENCE_BREAK.finditer(window))
    if not breaks:
        return False  # a one-sentence response ("So the total is forty two") is read as it is
    last = window[breaks[-1].end():]
    if len(last.split()) < 2 or _STATES.search(last) or _DESCRIBES.search(last):
        return False
    return prose.answer_value(last) is None


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


_CLOSED = re.compile(r"(?:[.!?][\"'”’)\]*_$]*|[)\]])$")
_OPENS_ANOTHER = re.compile(
    r"(?i)^\W*(?:or|maybe|perhaps|possibly|alternatively|otherwise|instead|however|but|though|although|wait|hmm+|actually|hold\s+on"
    r"|on\s+the\s+other\s+hand)\b|\bor\s+(?:maybe|perhaps|possibly|rather|else)\b|\b(?:could|might|may)\s+(?:also\s+|instead\s+)?be\b"
    r"|\b(?:would|will)\s+(?:also\s+|instead\s+)?be\W*$|\b(?:becomes?|changes?\s+to)\W*$"
    r"|\banswer\s*(?:[:：=]|(?:is|was|would|should|could|might|may|becomes?|changes?)\b)|\\(?:boxed|fbox)\b|####")
"""What, begun after an answer and cut, may be a second answer: a sentence opening an
alternative, a contrary or a correction ("Or", "However", "Wait"), a hedge ("could also be"), a
value about to be given ("it would be", "becomes"), a new marker or box. ("This concept is used
for adding or subtracting" is commentary: its "or" opens nothing.)"""
_OFFERS_ANOTHER = re.compile(
    r"(?i)\b(?:or|maybe|perhaps|possibly|alternatively|otherwise|instead)\b|\b(?:could|might|may)\s+(?:also\s+|instead\s+)?be\b"
    r"|\banswer\s*(?:[:：=]|(?:is|was|would|should|could|might|may|becomes?|changes?)\b)|\\(?:boxed|fbox)\b|####")
"""What, in the answer's own sentence after it, offers another value ("\\boxed{42} or maybe")."""
_CONDITION = re.compile(r"(?i)\b(?:if|suppose|supposing|assuming|assume|unless|whether|were)\b")
"""What makes an answer's own sentence, when it stops mid-sentence, a condition ("If the answer
were \\boxed{42}, then"; "If we add them we get \\boxed{42} in total" is finished)."""


def left_open(text: str, found: Extraction | prose.Found) -> bool:
    """Whether the response stops, unpunctuated, inside another answer begun after ``found`` or
    inside a condition over it (see the module docstring)."""
    tail = text[found.end:].rstrip()
    body = tail.lstrip("}$)]*_ ")
    if not body or _CLOSED.search(tail) or found.parts or commit.bound("", tail):
        return False  # the answer ends the response, what follows it was finished, or it is a hedge or bound already
    window = body[-LAST_SENTENCE_CHARS:]
    breaks = list(_SENTENCE_BREAK.finditer(window))
    if breaks:
        return _OPENS_ANOTHER.search(window[breaks[-1].end():]) is not None
    if len(body) > LAST_SENTENCE_CHARS:
        return False  # no sentence end in a long stretch after the answer: not a clause begun on it
    if not re.search(r"[A-Za-z]", body):
        return False  # only punctuation after it ("\\boxed{42},")
    own = text[: found.start]
    start = max((m.end() for m in _SENTENCE_BREAK.finditer(own, max(0, len(own) - 300))), default=max(0, len(own) - 300))
    if _OFFERS_ANOTHER.search(body):
        return True  # "\\boxed{42} or maybe \\boxed{4", "The answer is 42 or maybe"
    return ends_mid_sentence(text) and _CONDITION.search(own[start:] + " " + body) is not None


__all__ = ["committed_answer", "cut_reason", "ends_mid_sentence", "left_open"]
