"""Answer text → tokens: LaTeX and plain-text normalisation before parsing.

Nothing here evaluates anything. The lexer knows a fixed vocabulary of LaTeX commands
(`COMMANDS`); any other command is a `ParseError`, so unknown input is refused, never guessed.

Normalisation done here (the parser sees clean tokens):
- math delimiters ``$ \\( \\) \\[ \\]``, ``\\left``/``\\right``/``\\big``, spacing commands;
- ``\\dfrac``/``\\tfrac`` → ``\\frac``, ``\\dbinom`` → ``\\binom``;
- Unicode math (``− × ÷ ≤ ≥ ≠ ≈ π √ ∞ ∅ ∪ ∩``, superscripts ``x²``) → the LaTeX it stands for;
  currency signs (``€ £ ¥``) and an area/volume unit glued to a number (``12m²``) are dropped;
- thousands separators ``1,000`` (outside brackets), ``1\\,000``, ``1{,}000``, ``4,\\!096``,
  ``1 000`` → one number, never a product or a list;
- ``!=`` is the relation ≠ (never a factorial followed by ``=``);
- numbers: decimals, scientific notation (``1.5e3``), repeating decimals (``0.\\overline{3}``,
  ``0.1(6)``, ``0.333...``), kept as exact text for `Fraction`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_ANSWER_CHARS = 10_000
"""Answers longer than this are not parsed (they compare as text): bounds time and memory."""

MAX_NUMBER_DIGITS = 4000
"""Longest numeric literal accepted (Python refuses int() of more than 4300 digits by default)."""


class ParseError(ValueError):
    """The answer is not in the supported grammar; the message says where."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # num, ident, cmd, text, op, open, close, sep, begin, end
    value: str
    pos: int


# Commands the lexer accepts; anything else is refused. Values: the token kind they become.
FUNCTIONS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
    "log", "ln", "lg", "exp", "sqrt", "gcd", "lcm", "max", "min", "det", "deg",
}
GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
    "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega",
}
RELATIONS = {
    "le": "<=", "leq": "<=", "leqslant": "<=", "ge": ">=", "geq": ">=", "geqslant": ">=",
    "ne": "!=", "neq": "!=", "lt": "<", "gt": ">", "approx": "≈", "simeq": "≈", "thickapprox": "≈",
}
SIMPLE = {
    "cdot": "*", "times": "*", "ast": "*", "div": "/", "pm": "pm", "mp": "mp",
    "cup": "cup", "in": "in", "to": "to", "circ": "circ", "degree": "degree",
    "infty": "infty", "pi": "pi", "emptyset": "emptyset", "varnothing": "emptyset",
    "ldots": "dots", "dots": "dots", "cdots": "dots", "dotsc": "dots", "%": "%", "$": "",
    "colon": ":", "mid": "|", "vert": "|", "lvert": "|", "rvert": "|", "setminus": "setminus",
    "imath": "i", "Rightarrow": "implies", "implies": "implies", "quad": " ", "qquad": " ",
    "neg": "neg", "prime": "prime", "cap": "cap",
}
WITH_ARGS = {"frac", "binom", "sqrt", "text", "overline", "bar", "begin", "end", "mathbb"}
BRACKETS = {"{": "\\{", "}": "\\}", "langle": "<(", "rangle": ">)", "lfloor": "floor(", "rfloor": "floor)", "lceil": "ceil(", "rceil": "ceil)"}
TEXT_COMMANDS = {"text", "textbf", "textit", "textrm", "textnormal", "mathrm", "mbox", "operatorname", "textsf"}
MATH_FONTS = {"mathbf", "mathit", "mathsf", "boldsymbol", "bm", "mathnormal"}
"""Font commands around math (``\\mathbf{6}``, ``\\boldsymbol{v}``): their content is math, kept as is."""

_STRIP = [
    (re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))"), ","),  # 4,\!096: the thin space is typography
    (re.compile(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|biggl|biggr|Biggl|Biggr|big|Big|bigg|Bigg)(?![A-Za-z])\s*\.?"), ""),
    (re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits|therefore|because|!)(?![A-Za-z])"), ""),
    (re.compile(r"\\[dtc]frac(?![A-Za-z])"), r"\\frac"),
    (re.compile(r"\\[hv]?phantom\s*(?:\{[^{}]*\}|\S)"), ""),
    (re.compile(r"\\[dt]binom(?![A-Za-z])"), r"\\binom"),
    (re.compile(r"(?<=\d)\s*(?:\\,|\{\s*,\s*\}|\\thinspace\s*|\\ )\s*(?=\d{3}(?!\d))"), ""),  # 1\,000  1{,}000
    (re.compile(r"(?<!\\)\\[,;:> ]|~|\\q?quad|\\enspace(?![A-Za-z])"), " "),  # \quadx: a space, then x
    (re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|°|\\degree(?![A-Za-z])|\^\s*\{\s*\\degree\s*\}"), "°"),
]
_UNICODE = str.maketrans({
    "−": "-", "–": "-", "×": "*", "·": "*", "⋅": "*", "∙": "*", "÷": "/", "∕": "/", "\u00a0": " ", "\u2009": " ",
    "\u202f": " ", "\u200b": "", "，": ",", "：": ":", "€": " ", "£": " ", "¥": " ", "′": "'",
})
_VULGAR = {"½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅙": "1/6", "⅛": "1/8"}
_VULGAR_RUN = re.compile(r"(\d*)\s*([½⅓⅔¼¾⅕⅙⅛])")
"""``2½`` is two and a half (a mixed number), ``½`` a half."""
_UNICODE_WORDS = {
    "≤": "\\le ", "≥": "\\ge ", "≠": "\\ne ", "≈": "\\approx ", "∞": "\\infty ", "π": "\\pi ", "√": "\\sqrt ",
    "∛": "\\sqrt[3] ", "∅": "\\emptyset ", "∪": "\\cup ", "∩": "\\cap ", "±": "\\pm ", "∓": "\\mp ", "∈": "\\in ",
    "⩽": "\\le ", "⩾": "\\ge ", "θ": "\\theta ", "α": "\\alpha ", "β": "\\beta ", "ℝ": "\\mathbb{R}", "∖": "\\setminus ",
    "∴": "", "∵": "",
}
_DECORATION = re.compile(r"[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B50\uFE0F]|°\s*[CF]\b")
"""Emoji and check marks after an answer, and temperature units (``25°C``): dropped."""
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_RUN = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+")
_GLUED_AREA_UNIT = re.compile(r"(?<=\d)\s?(?:mm|cm|km|m|ft|in|yd|mi)[²³](?![A-Za-z0-9])")
"""``12m²``, ``3 cm³``: an area or volume unit after a number (a variable would not be glued to
the number with a Unicode power)."""


def strip_delimiters(s: str) -> str:
    """Remove surrounding math delimiters and trailing sentence punctuation."""
    s = s.strip()
    for _ in range(3):
        before = s
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
                s = s[len(left): len(s) - len(right)].strip()
        if not re.search(r"(?:\.\.\.|\\[lc]?dots|…)$", s):  # an ellipsis is part of 0.333...
            s = re.sub(r"(?<!\\)[.,;:]+$", "", s).strip()  # "42." ends a sentence; "\," is spacing
        if s == before:
            break
    return s.replace("$", " ")


def normalize(s: str) -> str:
    """The string-level normalisation applied before tokenising (see module docstring)."""
    s = strip_delimiters(s.translate(_UNICODE))
    for ch, rep in _UNICODE_WORDS.items():
        if ch in s:
            s = s.replace(ch, rep)
    if not s.isascii():
        s = _DECORATION.sub("", s)
        s = _VULGAR_RUN.sub(lambda m: f"({m.group(1)}+{_VULGAR[m.group(2)]})" if m.group(1) else f"({_VULGAR[m.group(2)]})", s)
        s = _GLUED_AREA_UNIT.sub("", s)
        s = _SUPERSCRIPT_RUN.sub(lambda m: "^{" + m.group(0).translate(_SUPERSCRIPTS) + "}", s)
    for pattern, rep in _STRIP:
        s = pattern.sub(rep, s)
    return s.strip()


_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)")
_SCI = re.compile(r"[eE][+-]?\d+(?![\d.])(?![A-Za-z\^])")
_REPEAT_PAREN = re.compile(r"\((\d+)\)")
_REPEAT_CMD = re.compile(r"\\(?:overline|bar|dot)\s*\{\s*(\d+)\s*\}|\\(?:overline|bar|dot)\s*(\d)")
_ELLIPSIS = re.compile(r"\s*(?:\.\.\.|\\ldots|\\dots|\\cdots|…)")
_THOUSANDS_COMMA = re.compile(r"\d{1,3}(?:,\d{3})+(?![\d,])(?!\.\d*,)")
_THOUSANDS_SPACE = re.compile(r"\d{1,3}(?: \d{3})+(?![\d])")
_IDENT = re.compile(r"[A-Za-z]+")


def tokenize(s: str) -> list[Token]:
    """Tokens of a normalised answer; raises `ParseError` on anything outside the vocabulary."""
    if len(s) > MAX_ANSWER_CHARS:
        raise ParseError(f"answer longer than {MAX_ANSWER_CHARS} characters")
    tokens: list[Token] = []
    i, n, depth = 0, len(s), 0
    while i < n:
        c = s[i]
        if c.isspace():
            i += 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and s[i + 1].isdigit()):
            i = _number(s, i, depth, tokens)
            continue
        if c.isalpha() and c.isascii():
            m = _IDENT.match(s, i)
            assert m is not None
            tokens.append(Token("ident", m.group(0), i))
            i = m.end()
            continue
        if c == "\\":
            i, depth = _command(s, i, depth, tokens)
            continue
        if c in "([{":
            depth += 1
            tokens.append(Token("open", c, i))
        elif c in ")]}":
            depth -= 1
            tokens.append(Token("close", c, i))
        elif c in "+-*/^_!=,;|&:'":
            if c == "!" and s.startswith("!=", i):  # x != 3 is a relation, never (x!) = 3
                tokens.append(Token("op", "!=", i))
                i += 2
                continue
            if c == "*" and s.startswith("**", i):  # plain-text power
                tokens.append(Token("op", "^", i))
                i += 2
                continue
            tokens.append(Token("op", c, i))
        elif c in "<>":
            if s.startswith(c + "=", i):
                tokens.append(Token("op", c + "=", i))
                i += 2
                continue
            tokens.append(Token("op", c, i))
        elif c == "%":
            tokens.append(Token("op", "%", i))
        elif c == "°":
            tokens.append(Token("op", "°", i))
        elif c == "…":
            tokens.append(Token("op", "dots", i))
        elif c == "≈":
            tokens.append(Token("op", "≈", i))
        else:
            raise ParseError(f"unexpected character {c!r} at position {i}")
        i += 1
    return tokens


def _number(s: str, i: int, depth: int, tokens: list[Token]) -> int:
    """Read one numeric literal at ``s[i]`` (with thousands separators, exponent, repetition).

    The token's value is exact text for `literal_value`: ``"1000"``, ``"1.5e3"``, or
    ``"0.1|6"`` for the repeating decimal 0.1666...
    """
    if depth == 0:
        # thousands separators only outside brackets: inside, ``(1,000)`` is ambiguous with a pair
        for pattern in (_THOUSANDS_COMMA, _THOUSANDS_SPACE):
            m = pattern.match(s, i)
            if m:
                text, end = re.sub(r"[, ]", "", m.group(0)), m.end()
                dec = re.match(r"\.\d+", s[end:])
                if dec:
                    text, end = text + dec.group(0), end + dec.end()
                tokens.append(Token("num", text, i))
                return end
    m = _NUMBER.match(s, i)
    assert m is not None
    text, end = m.group(0), m.end()
    if len(text) > MAX_NUMBER_DIGITS:
        raise ParseError(f"numeric literal of {len(text)} digits at position {i} is too long")
    if "." in text:
        rep = _REPEAT_CMD.match(s, end)
        if rep is not None:
            tokens.append(Token("num", f"{text}|{rep.group(1) or rep.group(2)}", i))
            return rep.end()
        rep = _REPEAT_PAREN.match(s, end)
        if rep is not None and _repeat_paren_ok(s, rep):
            tokens.append(Token("num", f"{text}|{rep.group(1)}", i))
            return rep.end()
        ell = _ELLIPSIS.match(s, end)
        if ell is not None:
            block = _repeating_tail(text)
            if block is None:
                raise ParseError(f"decimal {text}... at position {i} has no repeating block")
            tokens.append(Token("num", f"{text[: len(text) - 2 * len(block)]}|{block}", i))
            return ell.end()
    sci = _SCI.match(s, end)
    if sci is not None:
        text += sci.group(0).lower()
        end = sci.end()
    tokens.append(Token("num", text, i))
    return end


MAX_EXPONENT_LITERAL = 400
"""Largest power of ten a literal like ``1e400`` may carry (bounds the exact value's size)."""


def literal_value(text: str) -> Fraction:
    """The exact value of a numeric token produced by `tokenize`."""
    if "|" in text:  # repeating decimal: prefix|block
        prefix, block = text.split("|")
        decimals = len(prefix.split(".")[1]) if "." in prefix else 0
        base = Fraction(prefix.rstrip(".") or "0")
        return base + Fraction(int(block), (10 ** len(block) - 1) * 10**decimals)
    if "e" in text:
        mantissa, exp = text.split("e")
        if abs(int(exp)) > MAX_EXPONENT_LITERAL:
            raise ParseError(f"exponent of {text} is out of range")
        return Fraction(mantissa) * Fraction(10) ** int(exp)
    return Fraction(text)


def _repeat_paren_ok(s: str, m: re.Match) -> bool:
    # ``0.1(6)`` is a repeating decimal only when nothing multiplies it: not ``0.5(6)+1``-like use
    # after an operator. We accept it when the parenthesis closes the answer or is followed by a
    # separator or relation.
    rest = s[m.end():].lstrip()
    return not rest or rest[0] in ",;)]}=<>" or rest.startswith("\\")


def _repeating_tail(text: str) -> str | None:
    """For ``0.142857142857`` (followed by an ellipsis) the repeating block ``142857``."""
    digits = text.split(".")[1]
    for size in range(1, len(digits) // 2 + 1):
        block = digits[-size:]
        if digits.endswith(block * 2):
            return block
    return None


def _command(s: str, i: int, depth: int, tokens: list[Token]) -> tuple[int, int]:
    """Read a backslash command at ``s[i]``; returns the new position and bracket depth."""
    if i + 1 >= len(s):
        raise ParseError("dangling backslash at the end")
    nxt = s[i + 1]
    if not nxt.isalpha():
        if nxt in "{}":
            tokens.append(Token("open" if nxt == "{" else "close", BRACKETS[nxt], i))
            return i + 2, depth + (1 if nxt == "{" else -1)
        if nxt == "\\":
            tokens.append(Token("sep", "row", i))
            return i + 2, depth
        if nxt in "%$":
            if nxt == "%":
                tokens.append(Token("op", "%", i))
            return i + 2, depth
        if nxt in "|":
            tokens.append(Token("op", "|", i))
            return i + 2, depth
        raise ParseError(f"unknown command \\{nxt} at position {i}")
    m = _IDENT.match(s, i + 1)
    assert m is not None
    name, end = m.group(0), m.end()
    if name in MATH_FONTS:
        content, end = _braced(s, end, name)
        tokens.extend(Token(t.kind, t.value, t.pos + end - len(content) - 1) for t in tokenize(content))
        return end, depth
    if name in TEXT_COMMANDS:
        content, end = _braced(s, end, name)
        tokens.append(Token("text", content, i))
        return end, depth
    if name in BRACKETS:
        kind = "open" if BRACKETS[name].endswith("(") else "close"
        tokens.append(Token(kind, BRACKETS[name], i))
        return end, depth + (1 if kind == "open" else -1)
    if name in ("begin", "end"):
        env, end = _braced(s, end, name)
        env = env.strip().rstrip("*")
        if name == "begin" and env == "array":  # drop the column spec: \begin{array}{cc}
            _, end = _braced(s, end, "array")
        tokens.append(Token(name, env, i))
        return end, depth
    if name == "mathbb":
        content, end = _braced(s, end, name)
        tokens.append(Token("ident", "mathbb:" + content.strip(), i))
        return end, depth
    if name in FUNCTIONS or name in WITH_ARGS:
        tokens.append(Token("cmd", name, i))
        return end, depth
    if name in GREEK:
        tokens.append(Token("ident", name, i))
        return end, depth
    if name in RELATIONS:
        tokens.append(Token("op", RELATIONS[name], i))
        return end, depth
    if name in SIMPLE:
        value = SIMPLE[name]
        if value.strip():
            tokens.append(Token("op", value, i))
        return end, depth
    raise ParseError(f"unsupported LaTeX command \\{name} at position {i}")


def _braced(s: str, i: int, what: str) -> tuple[str, int]:
    """The content of the ``{...}`` group starting at ``s[i]`` (after spaces)."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s) or s[i] != "{":
        if what in TEXT_COMMANDS and i < len(s) and s[i].isalnum():  # \mathrm i
            return s[i], i + 1
        raise ParseError(f"\\{what} expects a {{...}} argument at position {i}")
    depth, j = 0, i
    while j < len(s):
        if s[j] == "\\" and j + 1 < len(s):
            j += 2
            continue
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1: j], j + 1
        j += 1
    raise ParseError(f"unbalanced braces after \\{what}")
