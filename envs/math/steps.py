"""Process rewards: check the intermediate equalities of a worked solution, step by step.

A *step* is one link ``lhs = rhs`` of an equality chain whose sides are both constants (no
variables): ``347*8=2776``, ``$\\frac{3}{4} \\cdot 8 = 6$``, GSM8K calculator notes
``<<16-3-4=9>>``. Lines with variables (``2x + 3 = 7``) are equations being solved, not claims
that can be checked alone, and are skipped. Each step gets reward 1.0 when the two sides are
equal and 0.0 otherwise, with the character span of the link in the completion.

Rounded results are allowed: a right-hand side written as a decimal with k places passes when the
left side rounds to it (``10/3 = 3.33``). Checks are exact in pure Python (`envs.math.exact`),
falling back to a float comparison for trigonometry and logs; sympy is never used here, so
process rewards cost microseconds per step.
"""

from __future__ import annotations

import re
from fractions import Fraction

from envs.math import exact, numeric
from envs.math import nodes as N
from envs.math.lexer import ParseError
from envs.math.parser import parse_answer
from envs.types import StepReward

MAX_STEPS = 64
MAX_SIDE_CHARS = 200

_ANNOTATION = re.compile(r"<<([^<>\n]{1,400})>>")
_MATH = re.compile(r"\$\$(.+?)\$\$|\\\[(.+?)\\\]|\\\((.+?)\\\)|(?<![\\\d])\$([^$\n]+?)\$", re.S)
_PLAIN_RUN = re.compile(r"[0-9.,+\-*/×÷^() \t$%=]+")  # a simple class: linear-time scan
MAX_TEXT_CHARS = 50_000
"""Completions longer than this get no process rewards (bounds the scan; no real solution is)."""
MAX_LINE_CHARS = 1000
_DECIMAL = re.compile(r"^\s*\$?\s*-?\d[\d,]*\.(\d+)\s*$")


def step_rewards(text: str, max_steps: int = MAX_STEPS) -> tuple[StepReward, ...]:
    """The checked equality steps of ``text``, in order of position."""
    steps: list[StepReward] = []
    if len(text) > MAX_TEXT_CHARS or "=" not in text:
        return ()
    masked = list(text)

    def mask(a: int, b: int) -> None:
        masked[a:b] = "\x00" * (b - a)  # not in the plain-run alphabet: runs stop at masked text

    for m in _ANNOTATION.finditer(text):
        _chain(text, m.start(1), m.end(1), steps)
        mask(m.start(), m.end())
    for m in _MATH.finditer(text):
        k = next(i for i, g in enumerate(m.groups(), 1) if g is not None)
        for line_start, line_end in _latex_lines(text, m.start(k), m.end(k)):
            _chain(text, line_start, line_end, steps)
        mask(m.start(), m.end())
    plain = "".join(masked)
    line_start = 0
    for line in plain.split("\n"):
        if "=" in line and len(line) <= MAX_LINE_CHARS:
            for m in _PLAIN_RUN.finditer(line):
                if "=" in m.group(0) and re.search(r"\d", m.group(0)):
                    lead = len(m.group(0)) - len(m.group(0).lstrip(" \t$,."))
                    _chain(plain, line_start + m.start() + lead, line_start + m.end(), steps)
        line_start += len(line) + 1
    steps.sort(key=lambda s: s.start)
    return tuple(steps[:max_steps])


def _latex_lines(text: str, start: int, end: int):
    """Split a display-math block at ``\\\\`` line breaks."""
    pos = start
    for m in re.finditer(r"\\\\", text[start:end]):
        yield pos, start + m.start()
        pos = start + m.end()
    yield pos, end


def _split_equals(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the sides of ``a = b = c`` at brace depth 0 (``\\le``/``<=``/``==`` are not links)."""
    parts, depth, pos = [], 0, start
    i = start
    while i < end:
        c = text[i]
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth -= 1
        elif c == "=" and depth == 0:
            prev, nxt = text[i - 1] if i > start else "", text[i + 1] if i + 1 < end else ""
            if prev not in "<>!=" and nxt != "=":
                parts.append((pos, i))
                pos = i + 1
        i += 1
    parts.append((pos, end))
    return parts


def _chain(text: str, start: int, end: int, steps: list[StepReward]) -> None:
    if len(steps) >= MAX_STEPS * 2:
        return
    sides = _split_equals(text, start, end)
    if len(sides) < 2:
        return
    values: list[tuple[N.Node | None, tuple[int, int]]] = []
    for a, b in sides:
        raw = text[a:b]
        lead = len(raw) - len(raw.lstrip())
        core = re.sub(r"(?<=\S)[\s.,;:$]+$", "", raw.strip())  # "3.33," ends a sentence
        values.append((_constant(core.replace("&", " ")), (a + lead, a + lead + len(core))))
    for (left, (ls, _)), (right, (rs, re_)) in zip(values, values[1:]):
        if left is None or right is None:
            continue
        rhs_text = text[rs:re_]
        reward = 1.0 if _equal(left, right, rhs_text) else 0.0
        steps.append(StepReward(ls, re_, reward, text[ls:re_]))


def _constant(side: str) -> N.Node | None:
    """The side as a constant tree, or None (empty, unparseable, has variables, too long)."""
    side = side.strip().strip("$").strip()
    if not side or len(side) > MAX_SIDE_CHARS or not re.search(r"\d", side):
        return None
    try:
        node = parse_answer(side)
    except (ParseError, RecursionError):
        return None
    if not isinstance(node, N.SCALAR_TYPES) or N.free_symbols(node):
        return None
    return node


def _equal(left: N.Node, right: N.Node, rhs_text: str) -> bool:
    places = _DECIMAL.match(rhs_text)
    try:
        lv, rv = exact.evaluate(left), exact.evaluate(right)
        if lv == rv:
            return True
        lq, rq = lv.as_rational(), rv.as_rational()
        if places and lq is not None and rq is not None:
            return abs(lq - rq) <= Fraction(1, 2 * 10 ** len(places.group(1)))
        if lq is not None and rq is not None:
            return False
    except exact.NotExact:
        pass
    try:
        a, b = numeric.approx(left), numeric.approx(right)
    except numeric.NoValue:
        return False
    if places:
        return abs(a - b) <= 0.5 * 10 ** -len(places.group(1)) * (1 + 1e-9)
    return numeric.close(a, b, 1e-9)
