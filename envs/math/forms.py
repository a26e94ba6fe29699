"""The form of an answer: is it a numeric literal, and does it restate the question?

A checker that only compares values credits ``68*8`` for 544 and ``(16-3-4)*2`` for 18: the
question's own expression, unevaluated, has the gold value. A policy trained on that reward
learns to copy its prompt. Two guards close it (`envs.math.env.check` applies them):

- `is_numeric_literal`: the answer is a value written out, not an operation to carry out. Numeric
  tasks (arithmetic, GSM8K, AIME) require it for a numeric gold.
- `Question.restates`: the answer is one of the question's expressions (or the same numbers under
  the same operators, reordered). Applied wherever the question is known, also where an
  expression is a legitimate answer (MATH: ``\\sqrt{8}`` for "Simplify $\\sqrt{8}$" is an echo,
  ``2\\sqrt{2}`` the answer).

A numeric literal here is, after an optional sign, and optionally inside brackets, with units,
words and a trailing ``%`` or ``°`` around it:

- an integer or decimal, with thousands separators (``1,000``, ``1\\,000``), scientific notation
  ``1.5e3``, or a repeating decimal (``0.\\overline{3}``);
- a fraction in lowest terms ``3/4``, ``\\frac{3}{4}``, ``-\\frac{3}{4}``, ``\\frac{-3}{4}``
  (``544/8`` and ``\\frac{10}{2}`` are divisions left undone);
- a mixed number ``2\\frac{1}{2}`` (a proper fraction after the whole part);
- normalised scientific notation ``1.5 \\times 10^{3}`` (mantissa in [1, 10));
- the last side of an equation whose last side is one of these (``x = 5``, ``68*8 = 544``: the
  value stated).

Everything here is a linear scan over the lexer's tokens; nothing is evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import gcd

from envs.math import lexer, numwords

_SIGN = r"[-+]?"
_LITERAL_SHAPES = {
    "number": re.compile(rf"{_SIGN}N%?"),  # 42, -3.5, 25%, 45°
    "fraction": re.compile(rf"{_SIGN}(?:N/N|F\({_SIGN}N\)\(N\)|N:N)%?"),  # 3/4, \frac{3}{4}, \frac{-3}{4}, 3:4
    "digits fraction": re.compile(rf"{_SIGN}FN%?"),  # \frac34
    "mixed": re.compile(rf"{_SIGN}N(?:F\(N\)\(N\)|FN)%?"),  # 2\frac{1}{2}, 16\frac23\%
    "scientific": re.compile(rf"{_SIGN}N\*N\^(?:N|\({_SIGN}N\)|{_SIGN}N)"),  # 1.5 \times 10^{3}
    "negative power of ten": re.compile(rf"{_SIGN}N\^(?:\(-N\)|-N)"),  # 10^{-3}
}
_OPERATORS = frozenset("+-*/^!")


@dataclass(frozen=True)
class _Shape:
    signature: str
    numbers: tuple[str, ...]


def _shape(text: str) -> _Shape | None:
    """The answer as a one-character-per-token signature (``N`` number, ``F`` ``\\frac``, ``(``
    ``)`` any bracket, ``=`` an equality, ``v`` a one-letter variable, operators as themselves,
    ``?`` anything else), with words, units and ``\\text{}`` left out (``km/h`` and ``cm^2``
    with them); None when the text does not tokenise."""
    try:
        tokens = lexer.tokenize(lexer.normalize(text))
    except (lexer.ParseError, RecursionError):
        return None
    sig: list[str] = []
    numbers: list[str] = []
    for t in tokens:
        if t.kind == "num":
            sig.append("N")
            numbers.append(t.value)
        elif t.kind == "text":
            sig.append("w")
        elif t.kind == "ident":
            name = t.value.lower()
            if name in _FUNCTION_WORDS:
                sig.append("?")  # sqrt(4), log 8: an operation
            elif len(name) > 1 and name.isalpha() and name not in lexer.GREEK:
                sig.append("w")  # a word or a unit: the comparison decides whether it matters
            else:
                sig.append("v")  # a variable (x, I, i, e, \\theta): 5x is not a number
        elif t.kind == "cmd":
            sig.append("F" if t.value == "frac" else "?")
        elif t.kind == "open":
            sig.append("(")
        elif t.kind == "close":
            sig.append(")")
        elif t.kind == "op":
            if t.value in _OPERATORS:
                sig.append(t.value)
            elif t.value in ("=", "≈"):
                sig.append("=")
            elif t.value in ("%", "°"):
                sig.append("%")
            elif t.value in (",", ";", ":"):
                sig.append(t.value)
            else:
                sig.append("?")
        else:
            sig.append("?")
    items = list(zip(sig, _numbers_in_order(sig, numbers)))
    k = 0
    while k < len(items):  # units: "km/h", "cm^2", "\\text{ cm}^{2}" are one word
        syms = "".join(c for c, _ in items[k: k + 5])
        if syms.startswith("w^N"):
            del items[k + 1: k + 3]
        elif syms.startswith("w^(N)"):
            del items[k + 1: k + 5]
        elif syms.startswith(("w/w", "w/v")):  # km/h, m/s
            del items[k + 1: k + 3]
        else:
            k += 1
    items = [(c, v) for c, v in items if c != "w"]
    return _Shape("".join(c for c, _ in items), tuple(v for c, v in items if c == "N"))


def _numbers_in_order(sig: list[str], numbers: list[str]) -> list[str | None]:
    it = iter(numbers)
    return [next(it) if c == "N" else None for c in sig]


_FUNCTION_WORDS = frozenset(lexer.FUNCTIONS | {"abs", "mod", "choose", "floor", "ceil", "factorial", "pi", "inf", "infty", "infinity"})


def _unwrap(sig: str) -> str:
    while len(sig) >= 2 and sig[0] == "(" and sig[-1] == ")" and _balanced(sig[1:-1]):
        sig = sig[1:-1]
    return sig


def _balanced(sig: str) -> bool:
    depth = 0
    for c in sig:
        depth += 1 if c == "(" else -1 if c == ")" else 0
        if depth < 0:
            return False
    return depth == 0


@lru_cache(maxsize=8192)
def _value(number: str) -> Fraction | None:
    try:
        return lexer.literal_value(number)
    except (lexer.ParseError, ValueError, ZeroDivisionError, OverflowError):
        return None


def is_numeric_literal(text: str, *, lowest_terms: bool = True) -> bool:
    """Whether ``text`` writes a number out (see the module docstring) rather than an operation
    on numbers. ``lowest_terms=False`` also accepts ``6/4`` (used to recognise numeric golds)."""
    shape = _shape(text)
    if shape is None:
        return False
    sig, numbers = shape.signature, list(shape.numbers)
    if "=" in sig:  # "x = 5", "68*8 = 544": the value stated is the last side
        *before, sig = sig.split("=")
        if any("," in side or ";" in side or ("v" in side and re.search(r"[-+*/^]", side)) for side in before):
            return False  # "x = -5, p = 14/3" (several values), "2x - y + 1 = 0" (an equation)
        numbers = numbers[len(numbers) - sig.count("N"):] if sig.count("N") else []
    sig = _unwrap(sig)
    if sig.endswith("%"):
        sig = _unwrap(sig[:-1]) + "%"
    kind = next((name for name, pattern in _LITERAL_SHAPES.items() if pattern.fullmatch(sig)), None)
    if kind is None:
        return False
    if kind in ("digits fraction", "mixed") and sig.rstrip("%").endswith("FN"):
        if len(numbers[-1]) != 2 or not numbers[-1].isdigit():
            return False  # \frac34 is 3/4; \frac345 is not a fraction of digits
        numbers = numbers[:-1] + [numbers[-1][0], numbers[-1][1]]
    values = [_value(n) for n in numbers]
    if any(v is None for v in values):
        return False
    if kind in ("fraction", "digits fraction"):  # in lowest terms: 544/8 is a division left undone
        num, den = values
        if den == 0 or num.denominator != 1 or den.denominator != 1:
            return False
        if lowest_terms and (den <= 1 or gcd(num.numerator, den.numerator) != 1):
            return False
    elif kind == "mixed":  # a whole part and a proper fraction
        whole, num, den = values
        if den == 0 or whole.denominator != 1 or num.denominator != 1 or den.denominator != 1 or not 0 < num < den:
            return False
    elif kind == "scientific":  # normalised: 1 <= mantissa < 10, base 10, whole exponent
        mantissa, base, exponent = values
        if base != 10 or exponent.denominator != 1 or not 1 <= abs(mantissa) < 10:
            return False
    elif kind == "negative power of ten":
        base, exponent = values
        if base != 10 or exponent.denominator != 1:
            return False
    return True


# -- restating the question ------------------------------------------------------------------

_MATH_SEGMENT = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_NUM = r"[-−]?\d+(?:,\d{3})*(?:\.\d+)?"
_PLAIN_EXPRESSION = re.compile(
    rf"(?:\(\s*)*{_NUM}(?:\s*\))*(?:\s*(?:[-+*/×÷^·−]|\*\*|\bx\b|\btimes\b|\bplus\b|\bminus\b|\bdivided\s+by\b)\s*(?:\(\s*)*{_NUM}(?:\s*\))*)+"
)
"""Arithmetic written in the question's text: ``98*1``, ``(16 - 3 - 4) * 2``, ``7 + 2 - 5``."""
_QUESTION_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.])\d+(?:\.\d+)?")
_RELATION = re.compile(r"\\(?:le|ge|leq|geq|ne|neq|approx)(?![A-Za-z])|<=|>=|!=|[=<>≤≥≠≈]")
_WORD_OPERATORS = [(re.compile(r"\s+(?:x|times)\s+"), "*"), (re.compile(r"\s+plus\s+"), "+"), (re.compile(r"\s+minus\s+"), "-"),
                   (re.compile(r"\s+divided\s+by\s+"), "/")]
MAX_QUESTION_CHARS = 20_000
"""Only this much of a question is read for its expressions (bounds the work per verification)."""


def question_expressions(text: str) -> list[str]:
    """The expressions a question writes, as written: its math (``$...$``, ``\\(...\\)``,
    ``\\[...\\]``) and the arithmetic in its text (``98*1`` in "Compute 98*1.")."""
    text = text[:MAX_QUESTION_CHARS]
    pieces, outside, pos = [], [], 0
    for m in _MATH_SEGMENT.finditer(text):
        content = next(g for g in m.groups() if g is not None)
        if m.group(0).startswith("$") and _PROSE.search(re.sub(r"\\[A-Za-z]+(?:\{[^{}]*\})?", " ", content)):
            continue  # "$3 each. He has 25 ...$": dollar signs around prose, not math
        pieces.append(content.strip())
        outside.append(text[pos: m.start()])
        pos = m.end()
    outside.append(text[pos:])
    pieces += [m.group(0).strip() for m in _PLAIN_EXPRESSION.finditer(" ".join(outside))]
    return [p for p in dict.fromkeys(pieces) if p]


_PROSE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}\b.*?(?<![\\A-Za-z])[A-Za-z]{3,}\b", re.S)
"""Two words of three letters or more: prose, not math."""


def _normal(text: str) -> str:
    """A restatement's comparable form: normalised LaTeX, one symbol per operator, no spaces,
    no outer brackets, no trailing ``= ?``."""
    for pattern, op in _WORD_OPERATORS:
        text = pattern.sub(op, text)
    s = lexer.normalize(text)
    s = re.sub(r"\\(?:cdot|times|ast)(?![A-Za-z])", "*", s)
    s = re.sub(r"\\div(?![A-Za-z])", "/", s)
    s = re.sub(r"\*\*", "^", s)
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"(?:=\??|\?)+$", "", s)
    while len(s) >= 2 and s[0] + s[-1] in ("()", "{}", "[]") and _balanced(s[1:-1].replace("[", "(").replace("]", ")").replace("{", "(").replace("}", ")")):
        s = s[1:-1]
    return s


def same_expression(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are written alike (spacing, delimiters, outer brackets and
    operator spelling aside): an answer written as the gold is never a restatement."""
    try:
        return _normal(a) == _normal(b)
    except lexer.ParseError:
        return False


def _operation(norm: str) -> bool:
    """Whether a normalised expression asks for something to be done (an operator or command)."""
    return bool(re.search(r"[-+*/^!]|\\[A-Za-z]+|_\{?\d", norm.lstrip("+-")))  # 1230_{4}: a base to convert


def _arith_key(norm: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Numbers and operators of a pure arithmetic expression, each sorted (``8*68`` and ``68*8``
    share a key); None when the expression has anything else in it."""
    if not re.fullmatch(r"[\d.+\-*/^()]+", norm):
        return None
    numbers = tuple(sorted(re.findall(r"\d+(?:\.\d+)?", norm)))
    ops = tuple(sorted(re.findall(r"[+\-*/^]", norm)))
    return (numbers, ops) if len(numbers) >= 2 and ops else None


def _contains(expression: str, part: str) -> bool:
    """Whether ``part`` occurs in ``expression`` as a whole (not ``8*6`` inside ``68*68``)."""
    at = expression.find(part)
    while at >= 0:
        before = expression[at - 1] if at else " "
        after = expression[at + len(part)] if at + len(part) < len(expression) else " "
        if not (before.isalnum() or before in "._\\") and not (after.isalnum() or after in "._"):
            return True
        at = expression.find(part, at + 1)
    return False


_WORD = re.compile(r"[A-Za-z]+|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")


_WORD_NUMBERS = {w: Fraction(i) for i, w in enumerate(numwords.UNITS)} | {w: Fraction(10 * (i + 2)) for i, w in enumerate(numwords.TENS)}


def token_value(token: str) -> Fraction | None:
    """The number a word token writes: digits (``1,200``) or one number word ("twelve"), else None."""
    if token[0].isdigit():
        return _value(token.replace(",", ""))
    return _WORD_NUMBERS.get(token.lower())


def stem(word: str) -> str:
    """A word's comparable form: lower case, a plural or possessive ``s`` dropped ("apples" →
    "apple", "Tom's" → "tom")."""
    w = word.lower()
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w


@dataclass(frozen=True)
class Question:
    """What an answer could restate: the question's expressions (normalised), its numbers (in
    digits or words), its words (`stem`) and each number with the words beside it.

    Build with `Question.of`; ``Question.of(None)`` restates nothing.
    """

    expressions: frozenset[str] = frozenset()
    arithmetic: frozenset[tuple[tuple[str, ...], tuple[str, ...]]] = frozenset()
    numbers: frozenset[Fraction] = frozenset()
    words: frozenset[str] = frozenset()
    contexts: frozenset[tuple[str, Fraction]] = frozenset()

    @classmethod
    def of(cls, text: str | None) -> Question:
        """The question ``text`` asks (cached: a group of completions shares its question)."""
        return _question_of(text[:MAX_QUESTION_CHARS]) if text else _NO_QUESTION

    @classmethod
    def _read(cls, text: str) -> Question:
        expressions: set[str] = set()
        for piece in question_expressions(text):
            for part in [piece, *_RELATION.split(piece)]:  # "x = 68*8": the whole and each side
                try:
                    norm = _normal(part)
                except lexer.ParseError:
                    continue
                if norm and _operation(norm):
                    expressions.add(norm)
        arithmetic = {k for k in map(_arith_key, expressions) if k is not None}
        numbers = set()
        for m in _QUESTION_NUMBER.finditer(text):
            value = _value(m.group(0).replace(",", ""))
            if value is not None:
                numbers.add(value)
        numbers.update(s.value for s in numwords.find(text))
        tokens = _WORD.findall(text)
        words = {stem(t) for t in tokens if t[0].isalpha()}
        contexts = set()
        for k, t in enumerate(tokens):
            if (value := token_value(t)) is not None:
                contexts.update((stem(tokens[j]), value) for j in (k - 1, k + 1) if 0 <= j < len(tokens) and token_value(tokens[j]) is None)
        return cls(frozenset(expressions), frozenset(arithmetic), frozenset(numbers), frozenset(words), frozenset(contexts))

    def restates(self, answer: str) -> bool:
        """Whether ``answer`` is one of the question's expressions (or its numbers under the same
        operators in another order). A bare number never restates: see `mentions`."""
        if not self.expressions or is_numeric_literal(answer):
            return False  # a number written out is a value, even one the question mentions
        try:
            norm = _normal(answer)
        except lexer.ParseError:
            return False
        if not norm or not _operation(norm):
            return False
        if norm in self.expressions:
            return True
        key = _arith_key(norm)
        if key is not None and key in self.arithmetic:
            return True
        # a part of one of the question's expressions: "(x+1-x)" of "(x+1-x)!/(x-x+1)!"
        return any(len(e) > len(norm) and _contains(e, norm) for e in self.expressions)

    def mentions(self, answer: str) -> bool:
        """Whether ``answer`` is a plain number that the question states (an operand)."""
        value = _value(answer.strip().replace(",", "")) if re.fullmatch(r"\s*-?\d[\d,]*(?:\.\d+)?\s*", answer) else None
        return value is not None and value in self.numbers

    def writes_beside(self, answer: str, words: list[str]) -> bool:
        """Whether the question writes the number ``answer`` beside one of ``words`` ("2 boxes"
        for "buys 2 boxes"): a restatement of its phrase, not a value found."""
        value = _value(answer.strip().replace(",", "")) if re.fullmatch(r"\s*-?\d[\d,]*(?:\.\d+)?\s*", answer) else None
        return value is not None and any((stem(w), value) in self.contexts for w in words)


_NO_QUESTION = Question()


@lru_cache(maxsize=4096)
def _question_of(text: str) -> Question:
    return Question._read(text)
