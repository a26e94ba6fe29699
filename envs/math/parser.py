"""Tokens → answer tree: a whitelist recursive-descent parser for LaTeX and plain-text answers.

Model text is never evaluated as Python (no ``eval``, no ``sympify``/``parse_expr``): the parser
accepts a fixed grammar and builds `envs.math.nodes` trees; anything else is a `ParseError`.

Grammar, loosest binding first::

    answers   := group (';' group)*                                    solutions: x=1,y=3; x=2,y=5
    group     := statement ((',' | 'or' | 'and') statement)*           several answers
    statement := union (relop union)*                                  = < <= > >= != ≈ and \\in
    union     := ratio (('\\cup' | 'U' | '\\cap' | '\\setminus') ratio)*     set algebra, left to right
    expr      := [sign] term (('+' | '-' | '\\pm') term)*
    term      := factor (('*' | '/' | implicit) factor)*              2x, 2\\pi, 2\\sqrt{3}
    factor    := ('-' | '+') factor | power
    power     := postfix ('^' exponent)?                               right-associative
    postfix   := atom ('!' | '%' | '°')*
    atom      := number | variable | constant | function | \\frac | \\sqrt | \\binom | group
               | tuple | interval | set | matrix | |abs| | text

Conventions (the comparison policy is documented in `envs.math.compare`): ``i`` is the imaginary unit, ``e`` Euler's number;
an integer directly followed by a numeric ``\\frac`` is a mixed number (``2\\frac12 = 5/2``);
units after a quantity are dropped; ``(a, b)`` is a tuple that also matches the open interval;
sums, products and integer powers of matrices are evaluated (`envs.math.matrices`).

Depth: nested groups (``\\frac{1}{1+\\frac{1}{...}}``, ``\\sqrt{\\sqrt{...}}``, ``((...))``,
towers ``a^{b^{c^{...}}}``) are parsed innermost first by `fold_groups`, one flat group at a time,
so the recursion depth does not grow with the nesting; a chain of thousands of signs is read in a
loop. Only structures that cannot be folded (nested tuples, intervals) are bounded by `MAX_DEPTH`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

from envs.math import matrices
from envs.math import nodes as N
from envs.math.lexer import ParseError, Token, literal_value, normalize, tokenize

MAX_DEPTH = 50
"""Deepest bracket/command nesting accepted; deeper input is refused rather than risking Python's
recursion limit (each level costs about a dozen frames)."""

UNITS = frozenset("""
cm centimeter centimeters centimetre centimetres mm millimeter millimeters km kilometer kilometers
kilometre kilometres meter meters metre metres inch inches ft foot feet yard yards yd yds mile miles
mph kph kmh kg kilogram kilograms gram grams mg lb lbs pound pounds ounce ounces oz ton tons tonne
tonnes liter liters litre litres ml milliliter milliliters gallon gallons gal quart quarts pint pints
cup cups second seconds sec secs minute minutes min mins hour hours hr hrs day days week weeks month
months year years yr yrs dollar dollars cent cents euro euros unit units sq square squared cubic per
rad radian radians mins sqft people persons times
""".split())
UNITS_TEXT_ONLY = frozenset("m g s h l".split())
"""Single-letter units are dropped only inside ``\\text{}``/``\\mathrm{}``: bare, they are variables."""

EMPTY_WORDS = re.compile(
    r"^(?:no\s+(?:real\s+|integer\s+)?solutions?|none|empty\s*set|the\s+empty\s+set|no\s+such\s+\w+|"
    r"there\s+(?:is|are)\s+no\s+(?:real\s+)?solutions?|\{\s*\}|\\emptyset|\\varnothing|∅)$",
    re.I,
)
_WORDS = re.compile(r"^[A-Za-z][A-Za-z\s\-']*$")
_CHOICE = re.compile(r"^\(?\s*([A-Ea-e])\s*\)?$")
REALS_EXCEPT = re.compile(r"^(?:all\s+)?real\s+numbers?\s+(?:except|other\s+than|but(?:\s+not)?)\s+(?:for\s+)?(?:x\s*=\s*)?(.+)$", re.I)
REALS_WORDS = re.compile(r"^(?:all\s+real\s+numbers|\\mathbb\s*\{?R\}?|all\s+reals|\(-\\infty,\s*\\infty\))$", re.I)

_KNOWN_WORDS = {"pi": N.PI, "inf": N.OO, "infty": N.OO, "infinity": N.OO, "infinite": N.OO}
INFINITY_WORDS = re.compile(r"^(?:\+\s*)?(?:infinity|infinite|infinitely\s+many(?:\s+\w+)?|an?\s+infinite\s+number(?:\s+of\s+\w+)?|infinite(?:ly)?\s+(?:solutions|values|ways))$", re.I)
"""Words for ∞ (``\\text{infinite}``, "infinitely many")."""
UNDEFINED_WORDS = re.compile(r"^(?:undefined|not\s+defined|does\s*n[o']t\s+exist|does\s+not\s+exist|dne|no\s+value|it\s+is\s+undefined|the\s+limit\s+does\s+not\s+exist)$", re.I)
"""Words for an undefined value; all of them mean the same answer, ``Text("undefined")``."""
_PERCENT_WORDS = {"percent", "pct", "percentage", "percents"}
_FUNC_ALIASES = {"lg": "log10", "arcsin": "asin", "arccos": "acos", "arctan": "atan"}
_MATRIX_ENVS = {"pmatrix", "bmatrix", "Bmatrix", "matrix", "smallmatrix", "array", "vmatrix"}
_SEPARATOR_WORDS = {"or", "and"}
_NOT_LABELS = frozenset("""sqrt sin cos tan cot sec csc log ln exp abs arcsin arccos arctan sinh cosh tanh lcm gcd max min
det deg mod percent pct percentage degrees degree and or""".split())
_RELOPS = {"=", "<", ">", "<=", ">=", "!=", "≈"}


def parse_answer(text: str) -> N.Node:
    """Parse one answer (LaTeX or plain text) into a tree; raises `ParseError`.

    Results are cached: golds repeat across a group of completions.
    """
    return _parse_cached(text)


@lru_cache(maxsize=8192)
def _parse_cached(text: str) -> N.Node:
    s = normalize(text)
    if not s:
        raise ParseError("empty answer")
    words = _strip_text_wrappers(s)
    if EMPTY_WORDS.match(words):
        return N.EmptySet()
    if INFINITY_WORDS.match(words):
        return N.OO
    if UNDEFINED_WORDS.match(words):
        return N.Text("undefined")
    if REALS_WORDS.match(words):
        return N.Interval(N.neg(N.OO), N.OO, True, True)
    except_ = REALS_EXCEPT.match(words)
    if except_:  # "all real numbers except 2 and 5": the reals without those points
        excluded = _parse_cached(except_.group(1))
        points = excluded.items if isinstance(excluded, (N.Answers, N.SetOf)) else (excluded,)
        return N.SetDiff(N.Interval(N.neg(N.OO), N.OO, True, True), N.SetOf(tuple(points)))
    choice = _CHOICE.match(words)
    if choice and ("(" in words or "\\text" in s):  # "(C)" / \text{(C)}: a multiple-choice letter
        return N.Text(choice.group(1).lower())
    if _WORDS.match(words) and _is_prose(words):
        return N.Text(_text_value(words))
    s = _strip_outer_parens(s)
    tokens = tokenize(s)
    if tokens and all(t.kind == "text" for t in tokens):
        content = " ".join(t.value for t in tokens)
        if re.fullmatch(r"[\s()]*[-+]?\d[\d.,]*[\s()]*", content):  # \textbf{(113)}: a number in text
            return _parse_cached(content.strip())
        if not re.fullmatch(r"\s*[A-Za-z]\s*", content):
            return N.Text(_text_value(content))
    return Parser(tokens).parse()


def _strip_outer_parens(s: str) -> str:
    """``((((2))))`` → ``2`` in one linear pass (grouping parentheses around the whole answer add
    nothing; a tuple keeps its own pair)."""
    if not s.startswith("(("):
        return s
    match: dict[int, int] = {}
    stack: list[int] = []
    for k, ch in enumerate(s):
        if ch == "(":
            stack.append(k)
        elif ch == ")" and stack:
            match[stack.pop()] = k
    i, j = 0, len(s) - 1
    while s[i] == "(" and match.get(i) == j and s[i + 1] == "(" and match.get(i + 1) == j - 1:
        i, j = i + 1, j - 1
    return s[i: j + 1]


def _strip_text_wrappers(s: str) -> str:
    return re.sub(r"\\(?:text|textbf|textit|textrm|mathrm|mbox|textnormal)\s*\{([^{}]*)\}", r"\1", s).strip()


def _is_prose(words: str) -> bool:
    """True for answers like ``Monday`` or ``even``: a word of 3+ letters that is not math."""
    for w in re.findall(r"[A-Za-z]+", words):
        lw = w.lower()
        if len(w) >= 3 and lw not in _KNOWN_WORDS and lw not in UNITS and w not in ("sqrt", "sin", "cos", "tan", "log", "ln", "exp"):
            return True
    return False


def _text_value(s: str) -> str:
    s = re.sub(r"[^0-9A-Za-z,\s]", " ", s.lower())
    return re.sub(r"\s+", " ", s).strip(" ,")


FOLD_MIN_DEPTH = 8
"""Groups are folded (`fold_groups`) only in answers nested at least this deep; shallower answers
are parsed directly (same trees, less work)."""

_FOLDABLE = {"{": "}", "(": ")"}
_OPENERS = {"{", "(", "[", "\\{", "<(", "floor(", "ceil("}


def fold_groups(tokens: list[Token], nodes: list[N.Node]) -> list[Token]:
    """Replace every plain ``{...}`` group and every single-item ``(...)`` group by one ``node``
    token holding its parsed tree, innermost first, in one left-to-right pass (a stack of token
    lists, no recursion). A group that does not parse on its own (a tuple, an interval such as
    ``(0, 1]``, a subscript ``x_{12}``) is left as tokens for the ordinary recursive parse."""
    stack: list[list[Token]] = [[]]
    openers: list[Token] = []
    for t in tokens:
        if t.kind == "open" and t.value in _OPENERS:
            openers.append(t)
            stack.append([])
            continue
        if t.kind == "close" and openers:
            opener, inner = openers.pop(), stack.pop()
            parent = stack[-1]
            subscript = bool(parent) and parent[-1].kind == "op" and parent[-1].value == "_"
            lone = opener.value == "{" or not any(x.kind == "op" and x.value in (",", ";") for x in inner)
            if _FOLDABLE.get(opener.value) == t.value and not subscript and lone:
                node = _parse_group(opener.value, inner, nodes)
                if node is not None:
                    nodes.append(node)
                    parent.append(Token("node", f"{opener.value}{len(nodes) - 1}", opener.pos))
                    continue
            parent.append(opener)
            parent.extend(inner)
            parent.append(t)
            continue
        stack[-1].append(t)
    while len(stack) > 1:  # unclosed brackets: the parser reports them
        inner = stack.pop()
        stack[-1].append(openers.pop())
        stack[-1].extend(inner)
    return stack[0]


def _nesting(tokens: list[Token]) -> int:
    depth = deepest = 0
    for t in tokens:
        if t.kind == "open":
            depth += 1
            deepest = max(deepest, depth)
        elif t.kind == "close":
            depth -= 1
    return deepest


def _parse_group(opener: str, inner: list[Token], nodes: list[N.Node]) -> N.Node | None:
    """The tree of one group's tokens, exactly as the recursive parser would read the group
    (``{...}`` as answers, ``(...)`` as one statement), or None when it is not a lone group."""
    if not inner:
        return None
    sub = Parser(list(inner), nodes=nodes)  # a copy: the parser rewrites tokens (\frac12)
    try:
        node = sub.answers() if opener == "{" else sub.statement()
    except (ParseError, RecursionError):
        return None
    return node if sub.i == len(inner) else None


def _times(a: N.Node, b: N.Node) -> N.Node:
    return matrices.multiply(a, b) if matrices.is_matrix(a) or matrices.is_matrix(b) else N.mul(a, b)


def _divide(a: N.Node, b: N.Node) -> N.Node:
    if matrices.is_matrix(b):
        raise ParseError("division by a matrix")
    return matrices.scale(N.div(N.ONE, b), a) if matrices.is_matrix(a) else N.div(a, b)  # type: ignore[arg-type]


def _plus(a: N.Node, b: N.Node) -> N.Node:
    return matrices.add(a, b) if matrices.is_matrix(a) or matrices.is_matrix(b) else N.add(a, b)


def _negate(a: N.Node) -> N.Node:
    return matrices.scale(N.MINUS_ONE, a) if matrices.is_matrix(a) else N.neg(a)  # type: ignore[arg-type]


def _raise(base: N.Node, exp: N.Node) -> N.Node:
    return matrices.power(base, exp) if matrices.is_matrix(base) else N.power(base, exp)  # type: ignore[arg-type]


class Parser:
    """Recursive descent over `Token`s; one instance parses one answer.

    Deeply nested answers are folded first (`fold_groups`), so the recursion only ever sees flat
    groups; ``nodes`` holds the trees of folded groups (given: parse these tokens as they are).
    """

    def __init__(self, tokens: list[Token], nodes: list[N.Node] | None = None):
        self.nodes: list[N.Node] = [] if nodes is None else nodes
        deep = nodes is None and _nesting(tokens) >= FOLD_MIN_DEPTH
        self.toks = fold_groups(tokens, self.nodes) if deep else tokens
        self.i = 0
        self.depth = 0
        self.abs_depth = 0

    # -- token helpers ------------------------------------------------------------------------

    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def at(self, kind: str, value: str | None = None, k: int = 0) -> bool:
        j = self.i + k
        if j >= len(self.toks):
            return False
        t = self.toks[j]
        return t.kind == kind and (value is None or t.value == value)

    def take(self) -> Token:
        t = self.peek()
        if t is None:
            raise ParseError("unexpected end of answer")
        self.i += 1
        return t

    def expect(self, kind: str, value: str | None = None) -> Token:
        t = self.peek()
        if t is None or t.kind != kind or (value is not None and t.value != value):
            where = f"{t.value!r} at position {t.pos}" if t else "end of answer"
            raise ParseError(f"expected {value or kind}, found {where}")
        self.i += 1
        return t

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"nesting deeper than {MAX_DEPTH}")

    # -- grammar ------------------------------------------------------------------------------

    def parse(self) -> N.Node:
        node = self.answers()
        if self.peek() is not None:
            t = self.peek()
            raise ParseError(f"unexpected {t.value!r} at position {t.pos}")
        return node

    def at_node(self, opener: str | None = None, k: int = 0) -> bool:
        """Whether the token ``k`` ahead is a folded group (opened by ``opener`` if given)."""
        t = self.peek(k)
        return t is not None and t.kind == "node" and (opener is None or t.value.startswith(opener))

    def _separator(self) -> bool:
        t = self.peek()
        if t is None:
            return False
        if t.kind == "op" and t.value == ",":
            return True
        if t.kind == "ident" and t.value.lower() in _SEPARATOR_WORDS:
            return True
        return t.kind == "text" and re.sub(r"[,\s]+", " ", t.value).strip().lower() in _SEPARATOR_WORDS | {""}

    def answers(self) -> N.Node:
        """Solutions separated by ``;``, each a group of answers separated by ``,``/and/or.

        ``-12; -11`` is a list like ``-12, -11``; ``x=1, y=3; x=2, y=5`` is two solutions, each an
        `Answers` of its own (the comparison reads a group as one ordered solution)."""
        groups = [self._group()]
        while self.at("op", ";"):
            while self.at("op", ";") or self._separator():
                self.take()
            if self.peek() is None:
                break
            groups.append(self._group())
        if len(groups) == 1:
            return groups[0]
        flat = [x for g in groups for x in (g.items if isinstance(g, N.Answers) else (g,))]
        if all(not isinstance(g, N.Answers) for g in groups):
            return N.Answers(tuple(flat))
        return N.Answers(tuple(groups))

    def _group(self) -> N.Node:
        items = [self.statement()]
        while self._separator():
            self.take()
            while self._separator():  # ", or", ", and"
                self.take()
            if self.peek() is None or self.at("op", ";"):
                break
            items.append(self.statement())
        return items[0] if len(items) == 1 else N.Answers(tuple(items))

    def statement(self) -> N.Node:
        terms = [self.union()]
        ops: list[str] = []
        while True:
            t = self.peek()
            if t is not None and t.kind == "op" and t.value in _RELOPS:
                ops.append(self.take().value)
                terms.append(self.union())
            elif t is not None and t.kind == "op" and t.value == "in":
                self.take()
                terms = [self.union()]  # "x \in [2, 5]": the answer is the set
                ops = []
            else:
                break
        return terms[0] if not ops else N.Relation(tuple(ops), tuple(terms))

    def union(self) -> N.Node:
        node = self.ratio()
        while True:
            t = self.peek()
            if t is None or t.kind not in ("op", "ident"):
                return node
            if self.at("op", "cup") or self._letter_u_union(node):
                self.take()
                rhs = self.ratio()
                left = node.items if isinstance(node, N.Union_) else (node,)
                node = N.Union_((*left, rhs))
            elif self.at("op", "cap"):
                self.take()
                rhs = self.ratio()
                node = N.Intersect((*(node.items if isinstance(node, N.Intersect) else (node,)), rhs))
            elif self.at("op", "setminus"):
                self.take()
                node = N.SetDiff(node, self.ratio())
            else:
                return node

    def _letter_u_union(self, node: N.Node) -> bool:
        """``(-\\infty, 2) U (3, \\infty)``: a capital U between two sets is the union."""
        if not (self.at("ident", "U") and isinstance(node, (N.Interval, N.Tuple, N.SetOf, N.Union_, N.EmptySet))):
            return False
        nxt = self.peek(1)
        return nxt is not None and (nxt.kind == "open" and nxt.value in ("(", "[", "\\{") or nxt.kind == "node")

    def ratio(self) -> N.Node:
        """``3:1`` is the ratio 3/1 (policy: a ratio answer is its quotient)."""
        node = self.expr()
        if self.at("op", ":"):
            self.take()
            node = N.div(node, self.expr())
        return node

    def expr(self) -> N.Node:
        node: N.Node | None = None
        if self.at("op", "pm") or self.at("op", "mp"):
            self.take()
            node = N.PlusMinus(N.ZERO, self.term())
        elif self.at("op", "-"):
            self.take()
            node = _negate(self.term())
        elif self.at("op", "+"):
            self.take()
        if node is None:
            node = self.term()
        while True:
            t = self.peek()
            if t is None or t.kind != "op" or t.value not in ("+", "-", "pm", "mp"):
                break
            self.take()
            rhs = self.term()
            if t.value == "+":
                node = _plus(node, rhs)
            elif t.value == "-":
                node = _plus(node, _negate(rhs))
            else:
                node = N.PlusMinus(node, rhs)
        return node

    def term(self) -> N.Node:
        node = self.factor()
        while True:
            self._skip_units()
            t = self.peek()
            if t is None:
                break
            if t.kind == "op" and t.value in ("*", "/"):
                self.take()
                rhs = self.factor()
                node = _times(node, rhs) if t.value == "*" else _divide(node, rhs)
            elif self._starts_atom(t) and not self._letter_u_union(node):
                if isinstance(node, N.Num) and t.kind == "num":
                    raise ParseError(f"two numbers side by side at position {t.pos}")
                mixed = self._mixed_number(node, t)
                node = mixed if mixed is not None else _times(node, self.factor())
            else:
                break
        return node

    def _mixed_number(self, node: N.Node, t: Token) -> N.Node | None:
        # 2\frac{1}{2} is two and a half: an integer literal directly before a numeric \frac
        if not (t.kind == "cmd" and t.value == "frac" and isinstance(node, N.Num) and node.value.denominator == 1):
            return None
        prev = self.toks[self.i - 1]
        if prev.kind != "num":
            return None
        start = self.i
        frac = self.atom()
        if isinstance(frac, N.Num) and 0 < frac.value < 1 and not self.at("op", "^"):
            # 12\frac{1}{2}\%: the postfix applies to the whole mixed number
            return self._postfix_ops(N.Num(node.value + frac.value if node.value >= 0 else node.value - frac.value))
        self.i = start
        return None

    def _starts_atom(self, t: Token) -> bool:
        if t.kind == "node":
            return True
        if t.kind in ("num", "ident", "begin"):
            return t.kind != "ident" or t.value.lower() not in _SEPARATOR_WORDS
        if t.kind == "cmd":
            return True
        if t.kind == "open":
            return True
        if t.kind == "op":
            return t.value in ("pi", "infty", "i") or (t.value == "|" and self.abs_depth == 0)
        return False

    def _skip_units(self) -> None:
        """Drop unit words after a quantity (``5 cm``, ``5\\text{ cm}^2``, ``3 square units``)."""
        while True:
            t = self.peek()
            if t is None:
                return
            if t.kind == "ident" and t.value.lower() in UNITS and len(t.value) > 1:
                self.take()
                while self.at("op", "/") and (nxt := self.peek(1)) is not None and nxt.kind == "ident" and (
                        nxt.value.lower() in UNITS or nxt.value in UNITS_TEXT_ONLY):
                    self.take()  # km/h, m/s: a compound unit
                    self.take()
            elif t.kind == "ident" and self._trailing_words():  # "15 marbles", "3 red cars": a noun label
                while self.at("ident"):
                    self.take()
                return
            elif t.kind == "text" and (_is_unit_text(t.value) or self._trailing_label(t)):
                self.take()
            else:
                return
            if self.at("op", "^") and (self.at("num", k=1) or self.at("open", "{", k=1) or self.at_node("{", k=1)):
                self.take()
                self.atom()

    def _trailing_words(self) -> bool:
        """Plain words (3+ letters, not math) running to the end of the answer or a separator."""
        k = 0
        while (t := self.peek(k)) is not None and t.kind == "ident":
            low = t.value.lower()
            if len(t.value) < 3 or not t.value.isalpha() or low in _KNOWN_WORDS or low in _NOT_LABELS or t.value in _GREEK_NAMES:
                return False
            k += 1
        nxt = self.peek(k)
        return k > 0 and (nxt is None or nxt.kind == "op" and nxt.value in (",", ";"))

    def _trailing_label(self, t: Token) -> bool:
        """A word label closing the answer (``575\text{ students}``): a noun, not math."""
        nxt = self.peek(1)
        at_end = nxt is None or (nxt.kind == "op" and nxt.value in (",", ";"))
        return at_end and bool(re.fullmatch(r"[A-Za-z][A-Za-z .]*", t.value.strip())) and t.value.strip().lower() not in _SEPARATOR_WORDS

    def factor(self) -> N.Node:
        negative = False
        while self.at("op", "-") or self.at("op", "+"):  # a loop: thousands of signs cost no depth
            negative ^= self.take().value == "-"
        node = self.power()
        return _negate(node) if negative else node

    def power(self) -> N.Node:
        base = self.postfix()
        if self.at("op", "^"):
            self.take()
            self.enter()
            exp = self.exponent()
            self.depth -= 1
            base = self._postfix_ops(_raise(base, exp))
        return base

    def exponent(self) -> N.Node:
        negative = False
        while self.at("op", "-") or self.at("op", "+"):
            negative ^= self.take().value == "-"
        if negative:
            return N.neg(self.exponent())
        base = self.atom()
        if self.at("op", "^"):  # right-associative: 2^3^2 = 2^(3^2)
            self.take()
            self.enter()
            base = N.power(base, self.exponent())
            self.depth -= 1
        return base

    def postfix(self) -> N.Node:
        return self._postfix_ops(self.atom())

    def _postfix_ops(self, node: N.Node) -> N.Node:
        while True:
            t = self.peek()
            if t is None or t.kind not in ("op", "ident", "text"):
                return node
            if self.at("op", "!"):
                self.take()
                node = N.Func("factorial", (node,))
            elif self.at("op", "%"):
                self.take()
                node = N.Percent(node)
            elif self.at("op", "°"):
                self.take()
                node = N.Degrees(node)
            elif self.at("ident") and self.peek().value.lower() in _PERCENT_WORDS | {"degrees", "degree"}:
                word = self.take().value.lower()
                node = N.Percent(node) if word in _PERCENT_WORDS else N.Degrees(node)
            elif self.at("ident", "per") and self.at("ident", "cent", k=1):
                self.take()
                self.take()
                node = N.Percent(node)
            elif self.at("text") and self.peek().value.strip().lower() in _PERCENT_WORDS | {"%", "per cent", "degrees", "degree"}:
                word = self.take().value.strip().lower()
                node = N.Percent(node) if word in _PERCENT_WORDS | {"%", "per cent"} else N.Degrees(node)
            else:
                return node

    # -- atoms --------------------------------------------------------------------------------

    def atom(self) -> N.Node:
        self.enter()
        try:
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self) -> N.Node:
        t = self.take()
        if t.kind == "node":
            return self.nodes[int(t.value[1:])]
        if t.kind == "num":
            return self._number(t)
        if t.kind == "ident":
            return self._ident(t)
        if t.kind == "cmd":
            return self._command(t)
        if t.kind == "open":
            return self._bracketed(t)
        if t.kind == "begin":
            return self._matrix(t)
        if t.kind == "text":
            return self._text_atom(t)
        if t.kind == "op":
            if t.value == "pi":
                return N.PI
            if t.value == "infty":
                return N.OO
            if t.value == "i":
                return N.I
            if t.value == "emptyset":
                return N.EmptySet()
            if t.value == "|":
                self.abs_depth += 1
                inner = self.expr()
                self.abs_depth -= 1
                self.expect("op", "|")
                return N.Func("abs", (inner,))
        raise ParseError(f"unexpected {t.value!r} at position {t.pos}")

    def _number(self, t: Token) -> N.Node:
        if self.at("op", "_") and "." not in t.value and "e" not in t.value and "|" not in t.value:
            self.take()  # 1011_2: a numeral in another base
            base_tok = self._subscript_text()
            if not base_tok.isdigit() or not 2 <= int(base_tok) <= 36:
                raise ParseError(f"bad number base {base_tok!r}")
            try:
                return N.Num(Fraction(int(t.value, int(base_tok))))
            except ValueError:
                raise ParseError(f"{t.value} is not a numeral in base {base_tok}") from None
        return N.Num(literal_value(t.value))

    def _subscript_text(self) -> str:
        if self.at("open", "{"):
            self.take()
            parts = []
            while not self.at("close", "}"):
                t = self.take()
                parts.append(N.to_text(self.nodes[int(t.value[1:])]) if t.kind == "node" else t.value)
            self.take()
            return "".join(parts)
        return self.take().value

    def _ident(self, t: Token) -> N.Node:
        name = t.value
        if name.startswith("mathbb:"):
            if name == "mathbb:R":
                return N.Interval(N.neg(N.OO), N.OO, True, True)
            return N.Text(name)
        low = name.lower()
        if low in _KNOWN_WORDS:
            return _KNOWN_WORDS[low]
        if name in ("sqrt", "sin", "cos", "tan", "log", "ln", "exp", "abs", "sec", "csc", "cot", "arcsin", "arccos", "arctan"):
            return self._function(name)
        if len(name) == 1 or name in _GREEK_NAMES:
            return self._variable(name)
        if len(name) == 2:  # "ab" in math text is a product: split it so "ab^2" is a·b²
            self.toks.insert(self.i, Token("ident", name[1], t.pos + 1))
            return self._letter(name[0])
        raise ParseError(f"unknown word {name!r} at position {t.pos}")

    def _letter(self, ch: str) -> N.Node:
        return N.I if ch == "i" else N.E if ch == "e" else N.Sym(ch)

    def _variable(self, name: str) -> N.Node:
        if self.at("op", "_"):
            self.take()
            return N.Sym(f"{name}_{self._subscript_text()}")
        return self._letter(name) if len(name) == 1 else N.Sym(name)

    def _text_atom(self, t: Token) -> N.Node:
        content = t.value.strip()
        low = content.lower()
        if EMPTY_WORDS.match(low):
            return N.EmptySet()
        if low in ("i", "e"):  # \mathrm{i}, \mathrm{e}
            return self._letter(low)
        if low in _KNOWN_WORDS:
            return _KNOWN_WORDS[low]
        if len(content) == 1 and content.isalpha():
            return self._variable(content)
        if re.fullmatch(r"\d+(?:\.\d+)?", content):  # \text{6}
            return N.Num(Fraction(content))
        if low in ("sin", "cos", "tan", "log", "ln", "exp", "lcm", "gcd", "sec", "csc", "cot", "arcsin", "arccos", "arctan"):
            return self._function(low)
        if re.fullmatch(r"[A-Za-z ,()]+", content):
            return N.Text(_text_value(content))
        raise ParseError(f"cannot read text {content!r} inside a formula")

    def _command(self, t: Token) -> N.Node:
        name = t.value
        if name == "frac":
            num, den = self._two_args()
            return N.div(num, den)
        if name == "binom":
            n, k = self._two_args()
            return N.Func("binom", (n, k))
        if name == "sqrt":
            index: N.Node | None = None
            if self.at("open", "["):
                self.take()
                index = self.expr()
                self.expect("close", "]")
            arg = self._arg()
            if index is None or index == N.Num(Fraction(2)):
                return N.Func("sqrt", (arg,))
            return N.Pow(arg, N.div(N.ONE, index))
        if name in ("overline", "bar"):
            raise ParseError("\\overline outside a repeating decimal")
        if name == "text":
            raise ParseError("stray \\text")
        return self._function(name)

    def _function(self, name: str) -> N.Node:
        name = _FUNC_ALIASES.get(name, name)
        power: N.Node | None = None
        base: N.Node | None = None
        for _ in range(2):
            if self.at("op", "^"):
                self.take()
                power = self.exponent()
            elif self.at("op", "_") and name == "log":
                self.take()
                base = self.exponent()
        if self.at_node():  # \sin(x), \sin{x}: a folded group is the whole argument
            args = [self.atom()]
        elif self.at("open", "("):
            self.take()
            args = [self.statement()]
            while self.at("op", ","):
                self.take()
                args.append(self.statement())
            self.expect("close", ")")
        elif self.at("open", "{"):
            args = [self._arg()]
        else:
            args = [self._bare_function_arg()]
        if name == "log" and base is not None:
            node: N.Node = N.Func("log", (args[0], base))
        elif name in ("log", "ln"):  # policy: \log without a base is the natural logarithm
            node = N.Func("log", (args[0],))
        else:
            node = N.Func(name, tuple(args))
        if power is not None:
            if power == N.MINUS_ONE and name in ("sin", "cos", "tan"):  # \sin^{-1} x is arcsin x
                return N.Func("a" + name, node.args)
            node = N.power(node, power)
        return node

    def _bare_function_arg(self) -> N.Node:
        """``\\sin 2x`` is sin(2x): factors written side by side, up to an operator or function."""
        node = self.power()
        while True:
            t = self.peek()
            if t is None or not (t.kind == "num" or (t.kind == "ident" and (len(t.value) <= 2 or t.value in _GREEK_NAMES) and t.value.lower() not in _SEPARATOR_WORDS | UNITS) or (t.kind == "op" and t.value == "pi")):
                return node
            node = N.mul(node, self.power())

    def _arg(self) -> N.Node:
        """A command argument: ``{...}`` or one token (``\\frac12``, ``\\sqrt2``, ``\\sqrt x``)."""
        if self.at("open", "{"):
            self.take()
            inner = self.answers()
            self.expect("close", "}")
            return inner
        t = self.peek()
        if t is not None and t.kind == "num" and len(t.value) > 1 and t.value.isdigit():
            # \frac12: LaTeX takes one character per argument
            self.toks[self.i] = Token("num", t.value[1:], t.pos + 1)
            return N.Num(Fraction(int(t.value[0])))
        return self.atom()

    def _two_args(self) -> tuple[N.Node, N.Node]:
        return self._arg(), self._arg()

    def _bracketed(self, t: Token) -> N.Node:
        opener = t.value
        if opener == "{":
            inner = self.answers()
            self.expect("close", "}")
            return inner
        if opener == "\\{":
            if self.at("close", "\\}"):
                self.take()
                return N.EmptySet()
            builder = self._set_builder()
            if builder is not None:
                return builder
            items = self._items()
            self.expect("close", "\\}")
            return N.SetOf(tuple(items))
        if opener == "<(":
            items = self._items()
            self.expect("close", ">)")
            return N.Tuple(tuple(items))
        if opener in ("floor(", "ceil("):
            inner = self.expr()
            self.expect("close", opener[:-1] + ")")
            return N.Func(opener[:-1], (inner,))
        items = self._items()
        close = self.take()
        if close.kind != "close" or close.value not in (")", "]"):
            raise ParseError(f"expected ) or ] at position {close.pos}, found {close.value!r}")
        if len(items) == 1:
            if opener == "(" and close.value == ")" or opener == "[" and close.value == "]":
                return items[0]
            raise ParseError(f"mismatched brackets {opener}...{close.value}")
        if len(items) == 2 and (opener == "[" or close.value == "]"):
            return N.Interval(items[0], items[1], opener == "(", close.value == ")")
        if opener == "(" and close.value == ")":
            return N.Tuple(tuple(items))
        if opener == "[" and close.value == "]":
            return N.Tuple(tuple(items))
        raise ParseError(f"mismatched brackets {opener}...{close.value}")

    def _set_builder(self) -> N.Node | None:
        """``\\{x \\mid x > 2\\}``, ``\\{x \\in \\mathbb{R} : x > 2\\}``: the set is what the condition
        defines (several conditions: their intersection). None when the braces list elements."""
        depth, k = 0, self.i
        while k < len(self.toks):
            t = self.toks[k]
            if t.kind == "open":
                depth += 1
            elif t.kind == "close":
                if depth == 0:
                    return None
                depth -= 1
            elif depth == 0 and t.kind == "op" and t.value in ("|", ":"):
                break
            k += 1
        else:
            return None
        head = self.toks[self.i: k]
        if not head or head[0].kind != "ident" or not (len(head) == 1 or head[1].kind == "op" and head[1].value == "in"):
            return None
        domain = Parser(list(head[2:]), nodes=self.nodes).union() if len(head) > 2 else None
        if domain is not None and domain != N.Interval(N.neg(N.OO), N.OO, True, True):
            raise ParseError("a set-builder over a domain other than the reals is not supported")
        self.i = k + 1
        condition = self.answers()
        self.expect("close", "\\}")
        if isinstance(condition, N.Answers):
            return N.Intersect(condition.items)
        return condition

    def _items(self) -> list[N.Node]:
        items = [self.statement()]
        while self.at("op", ",") or self.at("op", ";"):  # (0;-2;6): inside brackets ; separates items
            self.take()
            items.append(self.statement())
        return items

    def _matrix(self, t: Token) -> N.Node:
        if t.value not in _MATRIX_ENVS:
            raise ParseError(f"unsupported environment {t.value!r}")
        rows: list[tuple[N.Node, ...]] = []
        row: list[N.Node] = []
        while not self.at("end"):
            if self.peek() is None:
                raise ParseError(f"\\begin{{{t.value}}} without \\end")
            row.append(self.expr())
            if self.at("op", "&"):
                self.take()
            elif self.at("sep"):
                self.take()
                rows.append(tuple(row))
                row = []
        end = self.take()
        if end.value != t.value:
            raise ParseError(f"\\begin{{{t.value}}} closed by \\end{{{end.value}}}")
        if row:
            rows.append(tuple(row))
        if not rows or len({len(r) for r in rows}) != 1:
            raise ParseError("matrix rows have different lengths")
        matrix = N.Matrix(tuple(rows))
        return N.Func("det", (matrix,)) if t.value == "vmatrix" else matrix


_GREEK_NAMES = frozenset("""alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi
rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi Omega""".split())


def _is_unit_text(text: str) -> bool:
    text = re.sub(r"\^\s*\{?\s*[23]\s*\}?", "", text)  # m/s^2, cm^3
    words = re.findall(r"[A-Za-z]+", text.lower())
    if not words or re.search(r"[0-9]", text):
        return False
    return all(w in UNITS or w in UNITS_TEXT_ONLY for w in words)
