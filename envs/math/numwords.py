"""Numbers written as words: "zero" ... "twenty", the tens, "hundred", "thousand" and "half".

    value_of("eight miles per hour")  # Fraction(8)
    [m.value for m in find("two hundred and five, then twenty-one")]  # [205, 21]

`find` gives every number phrase of a text with its span (``twenty-five``, ``one hundred and
five``, ``three thousand four hundred``, ``a hundred``, ``two and a half``, ``one half``,
``half``); `value_of` reads a whole answer that is one number phrase, optionally followed by a
unit or a noun ("eight miles per hour", ``\\text{twelve}``), and nothing else: no other number,
no operation ("five plus three" is an operation, not a value). Whether a phrase in prose is a
count at all ("one of them", "each one") is the prose reader's decision (`envs.math.prose`).
Everything is a regular expression over the text: linear, nothing evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_VALUES = {**{w: i for i, w in enumerate(UNITS)}, **{w: 10 * (i + 2) for i, w in enumerate(TENS)}}

_SEP = r"(?:[ \t]+|-|[ \t]*-[ \t]*)"
_DIGIT_WORD = "|".join(UNITS[1:10])
_SMALL = rf"(?:(?:{'|'.join(TENS)})(?:{_SEP}(?:{_DIGIT_WORD}))?|{'|'.join(sorted(UNITS, key=len, reverse=True))})"
"""Zero to ninety-nine (longest words first: "seventeen" before "seven")."""
_HUNDREDS = rf"(?:(?:{_SMALL}|a){_SEP}hundred(?:{_SEP}(?:and{_SEP})?{_SMALL})?)"
_THOUSANDS = rf"(?:(?:{_HUNDREDS}|{_SMALL}|a){_SEP}thousand(?:{_SEP}(?:and{_SEP})?(?:{_HUNDREDS}|{_SMALL}))?)"
_WHOLE = rf"(?:{_THOUSANDS}|{_HUNDREDS}|{_SMALL})"
_PHRASE = re.compile(
    rf"(?i)(?<![\w-])(?:{_WHOLE}{_SEP}and{_SEP}a{_SEP}half|(?:a|one){_SEP}half|half|{_WHOLE})(?![\w-])"
)

_OPERATION_WORDS = re.compile(
    r"(?i)\b(?:plus|minus|times|divided|multiplied|over|squared|cubed|of|more|less|fewer|and|or|to|than|by|out|"
    r"thirds?|quarters?|fourths?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?|halves|hundredths?|thousandths?)\b"
)
"""Words that make a phrase an operation or a fraction ("five plus three", "half of 10", "two
thirds", "one and two"), not a value."""
_WORD_START = re.compile(r"[\s$]*(?:\\[a-z]+\s*\{\s*)?[A-Za-z]{3}")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}]*)\}")


@dataclass(frozen=True)
class Spelled:
    """A number written as words: its span in the text and its value."""

    start: int
    end: int
    value: Fraction

    @property
    def digits(self) -> str:
        """The value written in digits (``2.5`` for "two and a half")."""
        return digits(self.value)


def digits(value: Fraction) -> str:
    """``Fraction(5, 2)`` → ``2.5``; whole numbers without a decimal point."""
    if value.denominator == 1:
        return str(value.numerator)
    return str(value.numerator / value.denominator) if value.denominator in (2, 4, 5, 8, 10) else f"{value.numerator}/{value.denominator}"


_NUMBER_WORDS = frozenset(UNITS + TENS + ["hundred", "thousand", "half"])
_LETTERS = re.compile(r"[a-z]+")


def find(text: str) -> list[Spelled]:
    """Every number phrase of ``text``, in order.

    The phrase grammar is tried only where a word of it starts (a word scan rules out most texts
    at once: running the grammar at every position costs a hundred times more)."""
    low = text.lower()
    if _NUMBER_WORDS.isdisjoint(_LETTERS.findall(low)):
        return []
    out: list[Spelled] = []
    pos = 0
    for w in _LETTERS.finditer(low):
        if w.start() < pos or (w.group() not in _NUMBER_WORDS and w.group() != "a"):
            continue
        m = _PHRASE.match(text, w.start())
        if m is not None:
            out.append(Spelled(m.start(), m.end(), phrase_value(m.group(0))))
            pos = m.end()
    return out


def phrase_value(phrase: str) -> Fraction:
    """The value of one number phrase matched by `find` (``two hundred and five`` → 205)."""
    words = [w for w in re.split(r"[\s-]+", phrase.lower()) if w]
    if words[-1] == "half":
        whole = words[:-3] if len(words) > 3 and words[-3:-1] == ["and", "a"] else []
        return (phrase_value(" ".join(whole)) if whole else Fraction(0)) + Fraction(1, 2)
    total, current = 0, 0
    for w in words:
        if w == "a":
            current = 1
        elif w in _VALUES:
            current += _VALUES[w]
        elif w == "hundred":
            current = (current or 1) * 100
        elif w == "thousand":
            total += (current or 1) * 1000
            current = 0
    return Fraction(total + current)


def value_of(text: str) -> Fraction | None:
    """The value of an answer that is one number phrase, optionally with a unit or noun after it
    ("zero", "eight miles per hour", "\\text{twenty-five}"); None for anything else."""
    first = text.lstrip(" \t\n$")[:1]
    if not (first.isalpha() or first == "\\") or not _WORD_START.match(text):
        return None  # the common case, a number or LaTeX: no regex of number words to run
    s = _TEXT_WRAPPER.sub(r" \1 ", text).replace("$", " ").strip().rstrip(".!").strip()
    m = _PHRASE.match(s)
    if m is None:
        return None
    rest = s[m.end():]
    if re.search(r"\d|[=+*/^<>\\()]", rest) or _OPERATION_WORDS.search(rest) or _PHRASE.search(rest):
        return None
    if rest.strip() and not re.fullmatch(r"(?:\s+[A-Za-z][A-Za-z'.]*)+", rest):
        return None  # only words (a unit, a noun) may follow
    return phrase_value(m.group(0))
