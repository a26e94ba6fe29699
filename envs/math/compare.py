"""Exact comparison of a extracted answer with a gold answer.

Numbers (integers, decimals, fractions ``a/b``, thousands separators ``1,000``) compare as exact
rationals; anything else compares as text after whitespace and ``$`` removal. This is the exact
fast path; symbolic equivalence builds on it.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$|^[+-]?\.\d+$")
_FRACTION = re.compile(r"^([+-]?\d+)\s*/\s*(\d+)$")


def normalize_text(answer: str) -> str:
    s = answer.strip().strip("$").strip()
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def as_rational(answer: str) -> Fraction | None:
    """The exact value of a plain number or fraction, or None if ``answer`` is not one."""
    s = normalize_text(answer)
    if _NUMBER.match(s):
        return Fraction(s.replace(",", ""))
    m = _FRACTION.match(s)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    return None


def answers_equal(candidate: str, gold: str) -> bool:
    a, b = as_rational(candidate), as_rational(gold)
    if a is not None and b is not None:
        return a == b
    return normalize_text(candidate) == normalize_text(gold)
