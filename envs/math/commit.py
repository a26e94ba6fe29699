"""Commitment: the rules that decide whether an answer commits to one value, in both extraction
modes.

An answer span (the text after "Answer:" or "the answer is", a box, a bare line, or in lenient
mode the closing sentence) commits to a value only when it offers one. The rules, shared by
`envs.math.extract` and `envs.math.prose`:

- **A dollar sign is currency** unless it opens a real LaTeX span (`is_math_span`): the span
  closes on its line, its braces balance, and what it holds is math. ``$12 or $15``, ``$25 per
  day``, ``$10 + $5 = $15`` hold amounts, not math; ``$x = 5$`` and ``$\\frac{1}{2}$`` are math.
- **A remark is not a value**: a parenthetical with words in it ("(I multiplied 34 by 9)", "(3 red
  and 1 green)", "(120 minutes)") or with the arithmetic behind the value ("[3 × 4]"), and an
  aside after a dash ("12 — that's 3 boxes of 4") are set aside (`remarks`), unless the
  parenthetical offers another value ("(or 15)", "(maybe 15)", "(15 if we count tips)", "(15)"),
  which makes the answer a hedge.
- **Several values offered are a hedge** (`JOINED`, `joined_by`): values joined by "or", "either
  ... or", "/", a range ("10 to 20", "10–20", "between 10 and 20", "from 10 to 20") or a list.
  Where the gold is a single value such an answer fails with reason ``hedged``
  (`envs.math.env.check`); where the gold has several parts (roots, a set), the values are its
  answer. Values that are all equal ("12, or twelve") are one value. "12 or more", "at least 12"
  bound a value instead of stating it.
- **A copied sentence is not an answer** (`copied`): a sentence whose numbers all appear in the
  question as the question writes them (each beside a word the question writes beside it: "has
  12", "12 apples") and more than half of whose words the question also uses restates the prompt
  ("Tom has 12 apples.", a repetition loop printing a question sentence). A number the question
  does not write beside that word is stated ("So it takes Joy 8 hours to read 120 pages." states 8).

Everything is a regular expression or a set lookup over the span: linear in its length.
"""

from __future__ import annotations

import re
from fractions import Fraction

from envs.math import numwords
from envs.math.forms import Question, stem, token_value

# -- dollar signs -----------------------------------------------------------------------------

_SHORT_PROSE = frozenset("or and to of is at by on an as if so it be we he me my no up us per each a".split())
_WORDS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])")
_COMMAND = re.compile(r"\\[A-Za-z]+\s*(?:\{[^{}]*\})?")
_OPEN_END = re.compile(r"(?:[-+*/=,×÷]|\band)\s*$")


def is_math_span(content: str, after: str = "") -> bool:
    """Whether ``$content$`` (followed by ``after``) is LaTeX math rather than text between two
    currency signs. An amount is read as text when the span starts with a number and holds prose
    ("12 or ", "25 per day after selling 10 "), ends on an operator ("10 + "), or the closing sign
    is followed by a digit (it opens the next amount: ``$12 + $15``)."""
    if not content.strip() or "\n" in content or not _balanced_braces(content):
        return False
    if not re.match(r"\s*[-−+]?\s*\d", content):
        return True  # "$x = 5$", "$\frac{1}{2}$": starts with math
    if after[:1].isdigit() or _OPEN_END.search(content):
        return False
    words = _WORDS.findall(_COMMAND.sub(" ", content))
    return not any(len(w) >= 3 or w.lower() in _SHORT_PROSE for w in words)


def _balanced_braces(s: str) -> bool:
    depth = 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        depth += c == "{"
        depth -= c == "}"
        if depth < 0:
            return False
        i += 1
    return depth == 0


# -- remarks and alternatives -----------------------------------------------------------------

_PAREN = re.compile(r"\(([^()\n]{1,300})\)|\[([^\[\]\n]{1,300})\]")
_ALTERNATIVE = re.compile(r"(?i)^\s*(?:or|either|maybe|perhaps|possibly|alternatively|otherwise)\b")
"""Words that open an alternative ("(or 15)", "Or maybe 15."): the value after them is offered
as a second candidate."""
_MATH_WORDS = frozenset("sqrt sin cos tan log ln exp pi inf infty mod gcd lcm max min det abs floor ceil".split())


def remarks(text: str) -> list[tuple[int, int]]:
    """Spans of the parentheticals of ``text`` that are remarks in words: "(I multiplied 34 by
    9)", "(3 red and 1 green)", "[rounded]"; not "(1, 4]", "(C)", "(x+1)", nor an alternative
    "(or 15)"."""
    out = []
    dash = _DASH_REMARK.search(text) if ("—" in text or "–" in text or "-" in text) else None
    if dash:  # "12 — that's 3 boxes of 4": an aside after the value
        out.append((dash.start(), len(text)))
    if "(" not in text and "[" not in text:
        return out
    for m in _PAREN.finditer(text):
        inner = m.group(1) if m.group(1) is not None else m.group(2)
        if _ALTERNATIVE.match(inner) or m.start() == 0 and m.end() >= len(text.rstrip(" .")) or _offers(inner):
            continue
        words = [w for w in _WORDS.findall(_COMMAND.sub(" ", inner)) if w.lower() not in _MATH_WORDS]
        if any(len(w) >= 3 for w in words) or len(words) >= 2 or (m.start() and _ARITHMETIC.fullmatch(inner)):
            out.append((m.start(), m.end()))
    return out


_DASH_REMARK = re.compile(r"(?<=[\w%$)])\s+(?:—|–|--|-)\s+(?=[A-Za-z]{2})")
_ARITHMETIC = re.compile(r"\s*=?\s*[-−]?\$?\d[\d,.]*(?:\s*(?:[-+*/×÷^=x·]|\\times|\\cdot)\s*[-−]?\$?\d[\d,.]*)+\s*")
"""A bracket holding arithmetic after a value ("12 [3 × 4]", "12 (= 3 × 4)"): how it was got."""


_ALTERNATIVE_FIRST = frozenset("oempaOEMPA")


_LEADING_VALUE = re.compile(r"(?i)\s*(?:about|around|approximately|roughly|maybe|perhaps|possibly)?\s*[$€£]?\s*[-−]?\d[\d,]*(?:\.\d+)?\s*%?")
_CONDITION = re.compile(r"(?i)\s*(?:[A-Za-z]+\s+){0,2}?(?:if|when|or|depending|assuming|unless|otherwise|maybe|perhaps|possibly|instead)\b")


def _offers_value(inner: str) -> bool:
    """A parenthetical that offers another value: "(15)", "(15 if we count tips)"; not one that
    restates in other units ("(120 minutes)") or explains ("(34 times 9)")."""
    m = _LEADING_VALUE.match(inner)
    if m is None:
        word = numwords.find(inner[:40])
        if not word or inner[: word[0].start].strip():
            return False
        rest = inner[word[0].end:]
    else:
        rest = inner[m.end():]
    return not rest.strip() or _CONDITION.match(rest) is not None


_CONTRARY = re.compile(r"(?i)^(?:however|but|though|although|then\s+again|on\s+the\s+other\s+hand)\b[^.!?\n]{0,40}?"
                       r"\b(?:could|might|may|possibly|perhaps|maybe)\b")
"""A contrary clause that offers another value ("However, it could be 15 if ...")."""
_OFFERING = re.compile(r"(?i)\b(?:or|maybe|perhaps|possibl[ey]|could|might|may|also|alternatively|otherwise|unless)\b")
"""Words that make a bracket holding a value an alternative ("(though 15 is also possible)")."""


def opens_alternative(text: str) -> bool:
    """Whether ``text`` (what follows an answer) opens an alternative: "Or 15.", "(maybe 15)",
    "However, it could be 15."."""
    text = text.lstrip(" \t\n([*_-—–,;:")
    return (text[:1] in _ALTERNATIVE_FIRST and _ALTERNATIVE.match(text) is not None) or _CONTRARY.match(text) is not None


def brackets(text: str) -> list[tuple[int, int]]:
    """Spans of every bracketed aside of ``text`` ("(...)", "[...]" on one line)."""
    return [(m.start(), m.end()) for m in _PAREN.finditer(text)]


def alternatives(text: str) -> list[tuple[int, int]]:
    """Spans of the brackets of ``text`` that offer another value ("(or 15)", "(15 if we count
    tips)", "(could be 15)", "(though 15 is also possible)")."""
    if "(" not in text and "[" not in text:
        return []
    return [(m.start(), m.end()) for m in _PAREN.finditer(text) if _offers(m.group(1) if m.group(1) is not None else m.group(2))]


def _offers(inner: str) -> bool:
    has_value = re.search(r"\d", inner) is not None or bool(numwords.find(inner[:60]))
    return has_value and (_offers_value(inner) or _ALTERNATIVE.match(inner) is not None or _OFFERING.search(inner) is not None)


# -- bounds ----------------------------------------------------------------------------------

_BOUND_WORDS = r"(?:or\s+(?:more|less|fewer|so|greater|higher|lower|above|below|over|under|thereabouts)|at\s+(?:least|most)|up\s+to|no\s+(?:more|less|fewer)\s+than)"
_BOUND_WITHIN = re.compile(r"(?i)\b" + _BOUND_WORDS + r"\b")
_BOUND_AFTER = re.compile(r"(?i)^[\s}$)*_]*,?\s*" + _BOUND_WORDS + r"\b")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}]*)\}")


def bound(answer: str, after: str = "") -> str | None:
    """The bound an answer states instead of a value ("12 or more", ``\\boxed{12 \\text{ or more}}``,
    "at least 12", ``\\boxed{12}`` followed by "or so"), or None."""
    m = _BOUND_WITHIN.search(_TEXT_WRAPPER.sub(r" \1 ", answer)) if ("or" in answer or "at" in answer or "up" in answer or "no" in answer) else None
    m = m or (_BOUND_AFTER.match(after) if after else None)
    return " ".join(m.group(0).split()).strip(" ,}$)*_") if m else None


# -- values joined into one answer ------------------------------------------------------------

_UNIT = r"\s*(?:[A-Za-z][A-Za-z.'%°]*|%|°|\\%)"
JOINED = re.compile(
    r"(?i)^(?:"
    r"(?:" + _UNIT + r")?\s*(?P<list>,)"
    r"|(?:" + _UNIT + r"){0,2}\s*(?:"
    r"(?P<and>,?\s*and|,?\s*&)"
    r"|(?P<or>,?\s*\(?\s*(?:and\s*/\s*)?(?:or|either)(?:\s+(?:maybe|perhaps|possibly|even|else|rather))?|,?\s*\(?\s*(?:maybe|perhaps|possibly)|\s*\()"
    r"|(?P<range>\s*(?:to|through|till|until|[–—~]|-{2})\s*(?:about\s+|around\s+)?)"
    r"|(?P<slash>\s*/)"
    r"))\s*(?:either\s+)?$"
)
"""The text between two values that joins them into one answer: a list (``,`` ``and``), an
alternative (``or``, ``and/or``), a range (``to``, ``–``) or a slash between amounts
(``$12/$15``); a unit may sit before a comma ("12 apples, 15 apples"), up to two words before
the others ("12 apples or 15 apples", "20 cm long and 5")."""


def joined_by(between: str) -> str | None:
    """How ``between`` (the text between two values, dollar signs removed) joins them: ``list``,
    ``or``, ``range``, ``slash``, or None when it does not."""
    m = JOINED.match(between)
    if m is None:
        return None
    kind = next(k for k in ("list", "and", "or", "range", "slash") if m.group(k) is not None)
    return "list" if kind == "and" else kind


def same_values(parts: list[str] | tuple[str, ...]) -> bool:
    """Whether every part is the same plain number ("12", "12.0", "twelve" given as "12", "50%"
    and "0.5")."""
    values = set()
    for p in parts:
        s = p.replace(",", "").replace("$", "").replace("\\%", "%").strip()
        scale = Fraction(1, 100) if s.endswith("%") else 1
        try:
            values.add(Fraction(s.rstrip("%").strip()) * scale)
        except (ValueError, ZeroDivisionError):
            return False
    return len(values) == 1


# -- sentences copied from the question -------------------------------------------------------

_NUMBER_TOKEN = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])\d+(?:\.\d+)?")
_WORD_TOKEN = re.compile(r"[A-Za-z]+|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
COPY_SHARE = 0.5
"""A sentence is a copy when more than this share of its words are the question's (and its
numbers are the question's, one of them beside the same word)."""


def copied(sentence: str, question: Question) -> bool:
    """Whether ``sentence`` restates the question rather than answering it (see module docstring)."""
    if not question.words:
        return False
    tokens = _WORD_TOKEN.findall(sentence)
    values = [token_value(t) for t in tokens]
    numbers = [(k, v) for k, v in enumerate(values) if v is not None]
    if not numbers or any(v not in question.numbers for _, v in numbers):
        return False
    words = [stem(t) for t, v in zip(tokens, values) if v is None and len(t) >= 2]
    if len(words) < 2 or sum(w in question.words for w in words) <= COPY_SHARE * len(words):
        return False
    for k, v in numbers:  # each number beside a word the question writes beside it ("has 12", "12 apples")
        near = [tokens[j] for j in (k - 1, k + 1) if 0 <= j < len(tokens) and values[j] is None]
        if not any((stem(w), v) in question.contexts for w in near):
            return False  # "it will take Joy 8 hours to read 120 pages": 8 is stated, not copied
    return True


# -- answers not committed to: hypotheses, questions, retractions -----------------------------

_HYPOTHESIS_BEFORE = re.compile(
    r"(?i)\b(?:if|suppose|supposing|assume|assuming|whether|unless|imagine|pretend|let(?:'s|\s+us)\s+say)(?:\s+that)?[\s*_]*$")
"""Words that make the marker after them a hypothesis: "If the answer is 42, then ...", "Suppose
the answer is 42.", "Let's test whether the answer is 42." ("If we add them, the answer is 42"
states it: the condition is not the answer)."""
_QUESTIONED = re.compile(r"^[\s$}\])\"'”’*_]*\?")
_RETRACTION = re.compile(
    r"(?i)^\W*(?:(?:wait|hold\s+on|hmm+|oops|oh|actually)\b\W*)*no\b\s*[,.!;:]"
    r"|^\W*(?:wait|hold\s+on|hmm+|oops|oh|actually)\b\W*(?:no|not)\b"
    r"|\b(?:that|this|it|which)(?:'s|\s+is|\s+was)\s+(?:wrong|incorrect|not\s+(?:right|correct))\b"
    r"|\b(?:i|we)\s+(?:made|make)\s+(?:a|an)\s+(?:mistake|error)\b|\b(?:my\s+mistake|oops|scratch\s+that|i\s+was\s+wrong)\b"
    r"|\blet\s+me\s+(?:redo|recalculate|recompute|start\s+over|correct\s+(?:that|this|it))\b"
    r"|\bthat\s+can(?:'|no)t\s+be\s+right\b"
)
"""What takes an answer back when it follows it ("Answer: 42\\nWait, no. 6*7 =", "The answer is
42. Actually, that is wrong, let me redo:"): the answer is withdrawn, not given."""
RETRACTION_CHARS = 160
"""A retraction is looked for in this many characters after the answer (its next sentences)."""


def hypothesis(before: str) -> bool:
    """Whether the marker after ``before`` (its line up to the marker) is a hypothesis."""
    return _HYPOTHESIS_BEFORE.search(before[-80:]) is not None


def questioned(after: str) -> bool:
    """Whether the answer followed by ``after`` is asked, not stated ("Answer: 42?")."""
    return _QUESTIONED.match(after) is not None


def retracted(after: str) -> bool:
    """Whether ``after`` (what follows the last answer) takes it back."""
    tail = after[:RETRACTION_CHARS].lstrip(" \t\n.,;:!)]}$\"'”’*_")
    return _RETRACTION.search(tail) is not None
