"""Find the final answer in a model's completion.

Rules, in order of preference:
1. The *last* explicit answer wins, wherever it is: the last ``\\boxed{...}`` / ``\\fbox{...}``,
   "the (final) answer is ...", "Answer: ...", or "#### ..." (self-corrections are normal in
   chain-of-thought, so ``\\boxed{5} ... correcting, \\boxed{7}`` answers 7). Boxes separated only
   by commas, "and" or "or" form one multi-part answer (``\\boxed{2} and \\boxed{3}``).
2. A *bare* answer: a completion that is a single short line (``$\\frac{1}{2}$``, ``2i``) is its
   own answer.
3. Strict extraction (the default for rewards) stops there: no answer → ``no_answer``. Lenient
   extraction falls back to the last inline math ``$...$`` or the last number in the text.

Every scan is linear in the completion's length (brace matching uses one stack pass; markers are
searched line by line from the end), so a megabyte completion costs milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
_MARKERS = [
    re.compile(r"(?i)(?:^|[\s*_>#])(?:final\s+)?answer\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?\s*(?P<ans>.+)$"),
    re.compile(r"(?i)\bthe\s+(?:final\s+|correct\s+)?answer\s+(?:is|should\s+be|would\s+be)\s*[:：]?\s*(?P<ans>.+)$"),
    re.compile(r"^\s*####\s*(?P<ans>.+)$"),
]
_SENTENCE_END = re.compile(r"(?<![\d\\])\.(?:\s|$)|[;,]\s+(?:since|because|as|which|so|and\s+so)\b|\s+(?:since|because)\s")
_INLINE_MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_JOINER = re.compile(r"^[\s$,;]*(?:(?:and|or|\\text\{\s*(?:and|or)\s*\}|\\quad|&)[\s$,;]*)?$", re.I)

MARKER_LINE_CHARS = 2000
"""Markers are looked for in the last this-many characters of each line (bounds the scan)."""

BARE_MAX_CHARS = 200


@dataclass(frozen=True)
class Extraction:
    """An extracted answer and where it was found.

    Attributes:
        answer: The answer text (without its marker).
        start: Offset of the answer in the completion.
        end: Offset one past its end.
        method: Which rule found it (``boxed``, ``marker``, ``bare``, ``inline_math``, ``last_number``).
    """

    answer: str
    start: int
    end: int
    method: str


def _brace_matches(text: str) -> dict[int, int]:
    """Map each grouping ``{`` to its ``}`` in one pass (``\\{`` and ``\\}`` are not grouping)."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            matches[stack.pop()] = i
        i += 1
    return matches


def boxed_answers(text: str) -> list[Extraction]:
    """Every complete ``\\boxed{...}``/``\\fbox{...}`` in order (nested boxes count once)."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    matches = _brace_matches(text)
    found: list[Extraction] = []
    covered_until = -1
    for m in _BOXED.finditer(text):
        if m.start() < covered_until:
            continue  # a box inside a box: the outer one is the answer
        if m.group(1):
            close = matches.get(m.start(1))
            if close is None:
                continue
            inner_start = m.end()
            inner = text[inner_start:close].strip()
            while (nested := _BOXED.match(inner)) and nested.group(1) and inner.endswith("}"):
                inner = inner[nested.end():-1].strip()  # \boxed{\boxed{3}}
            found.append(Extraction(inner, inner_start, close, "boxed"))
            covered_until = close
        else:  # \boxed 5
            tail = re.match(r"\s*([^\s$]+)", text[m.end(): m.end() + 200])
            if tail:
                found.append(Extraction(tail.group(1), m.end() + tail.start(1), m.end() + tail.end(1), "boxed"))
    return [f for f in found if f.answer]


def _last_boxed(text: str) -> Extraction | None:
    boxes = boxed_answers(text)
    if not boxes:
        return None
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        between = text[prev.end + 1: group[0].start - len("\\boxed{")]
        if len(between) < 40 and _JOINER.match(between.replace("\\boxed", "")):
            group.insert(0, prev)
        else:
            break
    if len(group) == 1:
        return group[0]
    return Extraction(", ".join(g.answer for g in group), group[0].start, group[-1].end, "boxed")


_MARKER_HINT = re.compile(r"(?i)answer|####")
MARKER_HINTS_CHECKED = 20


def _last_marker(text: str) -> Extraction | None:
    """The last marker answer; only lines that mention "answer" or "####" are examined."""
    hints = [m.start() for m in _MARKER_HINT.finditer(text)][-MARKER_HINTS_CHECKED:]
    seen: set[int] = set()
    for pos in reversed(hints):
        start = text.rfind("\n", 0, pos) + 1
        if start in seen:
            continue
        seen.add(start)
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        offset = max(start, end - MARKER_LINE_CHARS)
        line = text[offset:end]
        best: Extraction | None = None
        for pattern in _MARKERS:
            m = pattern.search(line)
            if m and (best is None or m.start("ans") + offset > best.start):
                ans = _trim_marker_answer(m.group("ans"))
                if ans:
                    at = line.find(ans, m.start("ans"))
                    at = m.start("ans") if at < 0 else at
                    best = Extraction(ans, offset + at, offset + at + len(ans), "marker")
        if best is not None:
            return best
    return None


def _trim_marker_answer(ans: str) -> str:
    ans = ans.strip().strip("*_").strip()
    math = _INLINE_MATH.match(ans)
    if math:  # "the answer is $18$ dollars": the math is the answer
        return next(g for g in math.groups() if g is not None).strip()
    cut = _SENTENCE_END.search(ans)
    if cut:
        ans = ans[: cut.start()]
    return ans.strip().rstrip(".").strip()


def _bare(text: str) -> Extraction | None:
    stripped = text.strip()
    if not stripped or len(stripped) > BARE_MAX_CHARS or "\n" in stripped:
        return None
    start = text.index(stripped)
    return Extraction(stripped, start, start + len(stripped), "bare")


def extract_answer(text: str, *, strict: bool = True) -> Extraction | None:
    """The final answer in ``text``, or None when there is none (see module docstring)."""
    boxed = _last_boxed(text)
    marker = _last_marker(text)
    candidates = [c for c in (boxed, marker) if c is not None]
    if candidates:
        return max(candidates, key=lambda c: c.start)
    bare = _bare(text)
    if bare is not None or strict:
        return bare
    maths = list(_INLINE_MATH.finditer(text))
    if maths:
        m = maths[-1]
        k = next(i for i, g in enumerate(m.groups(), 1) if g is not None)
        return Extraction(m.group(k).strip(), m.start(k), m.end(k), "inline_math")
    numbers = list(_LAST_NUMBER.finditer(text))
    if numbers:
        m = numbers[-1]
        return Extraction(m.group(0), m.start(), m.end(), "last_number")
    return None
