"""Find the final answer in a model's completion.

Two modes (`EXTRACTION_MODES`), chosen per environment (``MathEnv(extraction=...)``), per task
(``env_kwargs``) and in ``rlvr verify`` / ``rlvr eval``:

- ``strict`` (the default, used for training rewards): only an explicit answer counts;
- ``lenient`` (for evaluating models that were not trained to mark their answer): when there is
  no explicit answer, the value stated by the last sentence that states one (`envs.math.prose`).

Rules, in order of preference:
1. The *last* explicit answer wins, wherever it is: the last ``\\boxed{...}`` / ``\\fbox{...}``,
   "the (final) answer is ...", "Answer: ...", or "#### ..." (self-corrections are normal in
   chain-of-thought, so ``\\boxed{5} ... correcting, \\boxed{7}`` answers 7). Boxes joined only by
   punctuation or short connecting prose ("and", "or", ``\\quad \\text{and} \\quad``, "papers and")
   form one multi-part answer; prose that corrects ("wait", "no", "actually") does not join. A
   marker answer ends at its sentence ("The answer is 42. Let me double check." answers 42); when
   it is itself a sentence ("Final Answer: The largest $n$ is 34.") the value it states is taken.
2. A *bare* answer: a completion that is a single short line (``$\\frac{1}{2}$``, ``2i``) is its
   own answer (in lenient mode only when it is not a prose sentence).
3. Strict extraction stops there: no answer → ``no_answer``. Lenient extraction reads the prose
   (`envs.math.prose.last_statement`), except in a cut response (cut at its token budget, or
   ending mid-sentence): there only a box, or a marker answer whose sentence ended before the cut,
   is an answer (`envs.math.cut`).
4. Given the question (``question=``), the prose's value is never a restatement of it: a
   sentence that only mentions the question's expression or names its operands ("The answer to
   75-53 is unknown to me.", "The sum of 47 and 38 is unknown.") states no answer.
5. Commitment (`envs.math.commit`), in both modes: a marker answer is read for the value it
   commits to (`envs.math.prose.answer_value`): "306 (I multiplied 34 by 9)" is 306, "17, not
   -17" is 17, "81-27, which is 54" is 54, "eight miles per hour" is 8, and ``$`` is currency
   unless it opens real LaTeX. Several values offered ("12 or 15", "$12 or $15", "between 10 and
   20", ``\\boxed{12} or \\boxed{15}``, "Answer: 12. Or maybe 15.") are kept in
   ``Extraction.parts``: `envs.math.env.check` fails them with reason ``hedged`` where the gold
   is one value. A marker followed by a sentence copied from the question answers nothing.
6. An answer not given is no answer, in both modes (`envs.math.commit`): a hypothesis ("If the
   answer is 42, then", "Suppose the answer is 42.", "whether the answer is 42"), an answer asked
   ("Answer: 42?"; followed by an alternative, "Answer: 42? Or maybe 43?", it is a hedge), and
   the last answer taken back by what follows it ("Answer: 42\nWait, no.", "Actually, that is
   wrong"). A response cut at its token budget answers, in strict mode too, only with a box or
   a marker answer whose sentence ended before the cut. An answer is not given either when the
   response stops, unpunctuated, inside a second answer, hedge or correction begun after it
   ("The answer is 42. Or maybe"), or inside a condition over it (`envs.math.cut.left_open`).

Escaped output (``\\\\frac{1}{2}``, ``\\n`` for line breaks, as JSON-encoded text shows it) is
unescaped first (`unescape`). Every scan is linear in the completion's length (brace matching
uses one stack pass; markers are searched line by line from the end), so a megabyte completion
costs milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from envs.math import commit, cut, lexer, prose
from envs.math.forms import Question

EXTRACTION_MODES = ("strict", "lenient")

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*(\{)?")
_MARKERS = [
    re.compile(r"(?i)(?:^|[\s*_>#])(?:final\s+)?answer\s*(?:\*\*|__)?\s*[:：]\s*(?:\*\*|__)?\s*(?P<ans>.+)$"),
    re.compile(r"(?i)\b(?:the\s+(?:final\s+|correct\s+)?|final\s+)answer\s+(?:is|should\s+be|would\s+be)\s*[:：]?\s*(?P<ans>.+)$"),
    re.compile(r"^\s*####\s*(?P<ans>.+)$"),
]
_CLOSERS = r"[\"'”’)\]*_]*"
_SENTENCE_END = re.compile(
    r"(?<![\d\\])(?<!\bi\.e)(?<!\be\.g)(?<!\bapprox)(?<!\bvs)(?<!\bcf)(?<!\betc)\." + _CLOSERS + r"(?:\s|$)|(?<=\d)\." + _CLOSERS + r"(?=\s+[A-Z\\(\[*\"“]|\s*$)|[!?]" + _CLOSERS + r"(?:\s|$)|"
    r"[;,]\s+(?:since|because|as|so|and\s+so)\b|\s+(?:since|because)\s"
)
"""Where a marker answer ends: a sentence end, also behind closing quotes or brackets (after a
digit only before a capital letter or the end: ``42. Let me check``, ``"42." Then`` but not
``3.5``), or a clause giving a reason or a consequence. ", which is 54" does not end it: it may
give the value of what came before ("81-27, which is 54")."""
_INLINE_MATH = re.compile(r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_JOIN_NOISE = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$|\\q?quad\b|\\[,;: !]|\\\\|&|~")
_JOIN_TEXT = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_NOT_JOINING = frozenset("""wait actually no not but however instead correct correction corrected mistake wrong oops hmm
recheck check again so therefore thus hence answer final is was then should would realize realized sorry error fix
redo rather earlier previous previously""".split())
MAX_JOIN_CHARS = 80

MARKER_LINE_CHARS = 2000
"""Markers are looked for in the last this-many characters of each line (bounds the scan)."""

BARE_MAX_CHARS = 200


@dataclass(frozen=True)
class Extraction:
    """An extracted answer and where it was found.

    Attributes:
        answer: The answer text (without its marker); several values offered are joined with ", ".
        start: Offset of the answer in the completion.
        end: Offset one past its end.
        method: Which rule found it (``boxed``, ``marker``, ``bare``, ``sentence``).
        parts: The values when the answer offers several ("12 or 15", ``\\boxed{2}, \\boxed{3}``):
            a hedge where the gold is one value, the parts of a multi-part answer otherwise.
        spelled: The words of a number written as words ("eight"); ``answer`` holds its digits.
        rule: Which rule decided, in words (``rlvr verify --explain`` prints it).
    """

    answer: str
    start: int
    end: int
    method: str
    parts: tuple[str, ...] = ()
    spelled: str | None = None
    rule: str = ""


_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.DOTALL)  # an escaped character (skipped whole) or a brace


def _brace_matches(text: str) -> dict[int, int]:
    """Map each grouping ``{`` to its ``}`` in one pass (``\\{`` and ``\\}`` are not grouping). The regex
    visits only backslashes and braces: a character-by-character loop took most of the time of reading
    MATH's 12,500 solutions."""
    matches: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_TOKENS.finditer(text):
        c = text[m.start()]
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            matches[stack.pop()] = m.start()
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
            found.append(Extraction(inner, inner_start, close, "boxed", rule=_BOX_RULE))
            covered_until = close
        else:  # \boxed 5
            tail = re.match(r"\s*([^\s$]+)", text[m.end(): m.end() + 200])
            if tail:
                found.append(Extraction(tail.group(1), m.end() + tail.start(1), m.end() + tail.end(1), "boxed", rule=_BOX_RULE))
    return [f for f in found if f.answer]


def joins_boxes(between: str) -> bool:
    """Whether the text between two boxes joins them into one answer (see module docstring)."""
    s = _JOIN_TEXT.sub(r" \1 ", _JOIN_NOISE.sub(" ", between))
    if len(s) > MAX_JOIN_CHARS or re.search(r"[.!?](?:\s|$)|\n\s*\n|\\|[=<>]", s):
        return False
    words = re.findall(r"[a-z]+", s.lower())
    if any(w in _NOT_JOINING for w in words):
        return False
    if not words:
        return re.fullmatch(r"[\s,;]*", s) is not None
    return bool({"and", "or"} & set(words)) or (bool(re.search(r"[,;]", s)) and len(words) <= 3)


_BOX_LABEL = re.compile(r"(?:\b[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?|\([A-Za-z0-9_{}, ]+\))\s*=\s*(?:\\\(|\$)?\s*$")
"""``y_2 = \\boxed{...}``: the label written just before a box."""


def _box_label(text: str, box: Extraction) -> re.Match | None:
    opener = text.rfind("\\", max(0, box.start - 60), box.start)
    return _BOX_LABEL.search(text, max(0, opener - 40), opener) if opener >= 0 else None


def _last_boxed(text: str) -> Extraction | None:
    boxes = boxed_answers(text)
    if not boxes:
        return None
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        opener = text.rfind("\\", 0, group[0].start)  # where the next box's command starts
        label = _box_label(text, group[0])
        between = text[prev.end + 1: label.start() if label and label.start() > prev.end else opener if opener > prev.end else group[0].start]
        if joins_boxes(between):
            group.insert(0, prev)
        else:
            break
    if len(group) == 1:
        return _box_alternative(text, boxes, group[0])
    parts = []
    for g in group:  # "y_1 = \boxed{A} and y_2 = \boxed{B}": the labels belong to the answer
        label = _box_label(text, g)
        parts.append(f"{label.group(0).rstrip().rstrip('$').rstrip()} {g.answer}".replace("\\(", "") if label and "=" not in g.answer else g.answer)
    if len(set(parts)) == 1 or commit.same_values(parts):  # "\boxed{12}, or more precisely \boxed{12}": one value
        return Extraction(group[-1].answer, group[0].start, group[-1].end, "boxed", rule="the last \\boxed{} (the boxes before it hold the same value)")
    return Extraction(", ".join(parts), group[0].start, group[-1].end, "boxed", parts=tuple(parts),
                      rule=f"the last {len(group)} \\boxed{{}} joined by connecting words into one answer")


def _box_alternative(text: str, boxes: list[Extraction], last: Extraction) -> Extraction:
    """The last box, or, where the text before it offers it as an alternative to the box before
    ("\\boxed{12}\n\nor maybe \\boxed{15}"), both values."""
    if len(boxes) < 2:
        return last
    prev = boxes[-2]
    opener = text.rfind("\\", prev.end, last.start)
    between = text[prev.end + 1: opener if opener > prev.end else last.start]
    if not commit.opens_alternative(_JOIN_NOISE.sub(" ", between).lstrip(" .,;:!)]}$*_\n")) or commit.same_values([prev.answer, last.answer]):
        return last
    parts = (prev.answer, last.answer)
    return Extraction(", ".join(parts), prev.start, last.end, "boxed", parts=parts, rule="the last \\boxed{} offered as an alternative to the one before")


_BOX_RULE = "the last \\boxed{}"
_MARKER_HINT = re.compile(r"(?i)answer|####")
MARKER_HINTS_CHECKED = 20


def _last_marker(text: str, asked: Question) -> Extraction | None:
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
        best_start = -1
        for pattern in _MARKERS:
            m = _last_match(pattern, line, lambda m: not commit.hypothesis(line[: m.start()]))
            if m and m.start("ans") > best_start:  # the marker written last on the line wins
                found = _marker_answer(m.group("ans"), offset + m.start("ans"), asked)
                if found is not None and not _VERDICT_WORDS.match(found.answer):
                    best, best_start = found, m.start("ans")
        if best is not None:
            return _with_alternative(text, best, asked)
    return None


_VERDICT_WORDS = re.compile(
    r"(?i)^(?:indeed\s+|therefore\s+|thus\s+|also\s+)?(?:correct|incorrect|right|wrong|reasonable|valid|invalid|confirmed|verified|"
    r"as\s+follows|below|above|given\s+by|shown|the\s+same|consistent|plausible|not\s+(?:correct|right|valid))\b"
)
""""The answer is correct": a judgement about an answer given elsewhere, not an answer."""


def _last_match(pattern: re.Pattern, line: str, keep) -> re.Match | None:
    """The kept match that starts last ("The answer is 5. No wait, the answer is 7." answers 7;
    a hypothesis, "If the answer is 5, then", is not kept)."""
    last, pos = None, 0
    while (m := pattern.search(line, pos)) is not None:
        if keep(m):
            last = m
        pos = m.start() + 1
    return last


_QUOTES_START = re.compile(r'^\s*(?:\\?["“]|\*\*|__)*')
_QUOTES_END = re.compile(r'(?:\\?["”]|\*\*|__|\s)*$')


def _marker_answer(raw: str, at: int, asked: Question) -> Extraction | None:
    """What the text after a marker (``raw``, at offset ``at`` of the completion) commits to, or
    None when it holds nothing or a sentence copied from the question (`envs.math.commit`)."""
    lead = at + _QUOTES_START.match(raw).end()
    raw = raw[lead - at:]
    ans = raw[: _QUOTES_END.search(raw).start()]
    maths = _leading_maths(ans)
    if maths:  # "the answer is $18$ dollars": the math is the answer ("$12$ and $13$": both)
        (first, _), (_, last_end) = maths[0], maths[-1]
        texts = [ans[a:b].strip() for a, b in maths]
        parts = tuple(texts) if len(texts) > 1 and not commit.same_values(texts) else ()
        return Extraction(", ".join(texts) if parts else texts[0], lead + first, lead + (last_end if parts else maths[0][1]), "marker",
                          parts=parts, rule="the math after the marker" + (" (several values joined)" if parts else ""))
    cut = _SENTENCE_END.search(ans)
    if cut:
        ans = ans[: cut.start()]
    ans = ans[: _QUOTES_END.search(ans).start()].rstrip(".").rstrip()
    if not ans:
        return None
    if _reads_as_prose(ans):  # "306 (I multiplied 34 by 9)", "17, not -17", "The largest $n$ is 34"
        found = prose.answer_value(ans, question=asked)
        if found is prose.COPIED:
            return None
        if found is not None:
            return Extraction(found.answer, lead + found.start, lead + found.end, "marker", parts=found.parts,
                              spelled=found.spelled, rule=f"marker answer: {found.rule}")
    return Extraction(ans, lead, lead + len(ans), "marker", rule="marker answer: the text after the marker")


def _reads_as_prose(ans: str) -> bool:
    """Whether a marker answer is read for the value it commits to rather than taken whole: it
    has words outside math (a sentence, a unit phrase, a remark, "or", a number in words) or a
    currency amount, and no LaTeX written outside math delimiters (``\\frac{1}{2} cm`` is taken
    whole: reading it would split its numbers)."""
    if _is_sentence(ans):
        return True
    outside = re.sub(r"\$[^$]*\$|\\\(.*?\\\)", " ", ans)
    if re.search(r"[\\{}^_]", outside):
        return False
    return bool(_SENTENCE_WORDS.search(outside) or re.search(r"\$\s?\d|[–—]|\bi\.e\.|\d\s+x\s+\d|\S\s+[(\[]", ans))


def _with_alternative(text: str, found: Extraction, asked: Question) -> Extraction:
    """A marker answer followed by an alternative ("Answer: 12. Or maybe 15.", "Answer: 12\nor
    15") offers both values."""
    if found.parts:
        return found
    tail = text[found.end: found.end + 300]
    rest = tail.lstrip(" \t\n.,;:!?)]\"'”*_")
    if not commit.opens_alternative(rest):
        return found
    clause = re.split(r"(?<=[.!?])\s|\n", rest, maxsplit=1)[0].rstrip(" .!?")
    alt = prose.answer_value(re.sub(r"(?i)^\W*(?:or|either|maybe|perhaps|possibly|alternatively)\b[\s,]*(?:maybe|perhaps|it(?:'s| is| could be| might be)|the answer (?:is|could be|might be))?\s*", "", clause), question=asked)
    if alt is None or alt is prose.COPIED or alt.parts or commit.same_values([found.answer, alt.answer]):
        return found
    parts = (found.answer, alt.answer)
    return replace(found, answer=", ".join(parts), parts=parts, rule=f"{found.rule}; an alternative follows it ({clause.strip()[:40]!r})")


def _leading_maths(ans: str) -> list[tuple[int, int]]:
    """Spans of the inline maths at the start of a marker answer, with those joined to it by
    "and"/commas; a dollar sign that is currency (`envs.math.commit.is_math_span`) opens none."""
    out: list[tuple[int, int]] = []
    m = _math_at(ans, 0)
    if m is None or ans[: m.start()].strip():
        return out
    while True:
        out.append(_content_span(m))
        nxt = _math_at(ans, m.end())
        if nxt is None or not joins_boxes(ans[m.end(): nxt.start()]):
            return out
        m = nxt


def _math_at(text: str, pos: int) -> re.Match | None:
    """The first real inline math at or after ``pos``."""
    while (m := _INLINE_MATH.search(text, pos)) is not None:
        if m.group(2) is None or commit.is_math_span(m.group(2), text[m.end(): m.end() + 1]):
            return m
        pos = m.start() + 1
    return None


def _content_span(m: re.Match) -> tuple[int, int]:
    k = next(i for i, g in enumerate(m.groups(), 1) if g is not None)
    a, b = m.span(k)
    inner = m.string[a:b]
    return a + len(inner) - len(inner.lstrip()), b - len(inner) + len(inner.rstrip())


_SENTENCE_WORDS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}\b")


def _is_sentence(text: str) -> bool:
    """Prose rather than an answer: two or more words outside math, ``\\text{}`` and commands."""
    outside = re.sub(r"\$[^$]*\$|\\\(.*?\\\)|\\[A-Za-z]+\s*(?:\{[^{}]*\})?", " ", text)
    words = [w for w in _SENTENCE_WORDS.findall(outside) if w.lower() not in _ANSWER_WORDS]
    return len(words) >= 2


_ANSWER_WORDS = frozenset("""and or pi sqrt sin cos tan log ln exp infinity infty none undefined no solution solutions
percent degrees degree dollars cents units cm mm km m""".split())


def _bare(text: str) -> Extraction | None:
    stripped = text.strip()
    if not stripped or len(stripped) > BARE_MAX_CHARS or "\n" in stripped:
        return None
    start = text.index(stripped)
    return Extraction(stripped, start, start + len(stripped), "bare", rule="a bare one-line answer")


def check_mode(extraction: str) -> str:
    """``extraction`` validated (raises ValueError naming the setting and its choices)."""
    if extraction not in EXTRACTION_MODES:
        raise ValueError(f"extraction must be one of {', '.join(EXTRACTION_MODES)}, got {extraction!r}")
    return extraction


def extract_answer(text: str, *, extraction: str = "strict", question: str | Question | None = None,
                   truncated: bool = False) -> Extraction | None:
    """The final answer in ``text``, or None when there is none (see module docstring).

    ``question`` (the problem's text): a sentence's value is never one of the question's
    expressions, nor one of its numbers named as an operand (rule 4 above). ``truncated``: generation
    cut the response at its token budget; in lenient mode a cut response (that, or one ending
    mid-sentence) answers only with what it committed to with a marker before the cut (`envs.math.cut`)."""
    check_mode(extraction)
    asked = question if isinstance(question, Question) else Question.of(question)
    boxed = _last_boxed(text)
    marker = _last_marker(text, asked)
    candidates = [c for c in (boxed, marker) if c is not None]
    last = max(candidates, key=lambda c: c.start) if candidates else None
    if last is not None and (_withdrawn(text, last) or cut.left_open(text, last)):
        return None
    if truncated or extraction == "lenient" and cut.cut_reason(text, truncated):
        found = cut.committed_answer(text, last)
        return replace(found, rule=f"{found.rule} (committed before the cut)") if found is not None else None
    if last is not None:
        return last
    bare = _bare(text)
    if extraction == "strict":
        return bare
    if bare is not None and not _has_words_outside_math(bare.answer):
        return bare
    found = prose.last_statement(text, question=asked)
    if found is not None:
        if cut.left_open(text, found):
            return None  # "So the total is 42 or maybe": the closing sentence stops inside an alternative
        return Extraction(found.answer, found.start, found.end, "sentence", parts=found.parts, spelled=found.spelled, rule=found.rule)
    return bare


LEFT_OPEN_RULE = ("the last answer is left open: the response stops, unpunctuated, inside a second answer, hedge, "
                  "correction or condition begun after it (\"The answer is 42. Or maybe\"), so it was not given")


def left_open(text: str, question: str | Question | None = None) -> bool:
    """Whether the last boxed or marker answer of ``text`` is left open (`envs.math.cut.left_open`):
    why `extract_answer` found no answer although one was written."""
    asked = question if isinstance(question, Question) else Question.of(question)
    candidates = [c for c in (_last_boxed(text), _last_marker(text, asked)) if c is not None]
    return bool(candidates) and cut.left_open(text, max(candidates, key=lambda c: c.start))


def _withdrawn(text: str, last: Extraction) -> bool:
    """Whether the last answer is not given after all: asked ("Answer: 42?", unless an alternative
    follows and makes it a hedge) or taken back by what follows it ("Answer: 42\nWait, no.")."""
    if last.parts:  # several values offered: a hedge, failed as one
        return False
    after = text[last.end:]
    return commit.questioned(after) or commit.retracted(after)


def _has_words_outside_math(text: str) -> bool:
    """``Answer $9$``, ``We find that $x < 3$``: prose around the math (lenient mode reads it)."""
    outside = re.sub(r"\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]|\\[A-Za-z]+\s*(?:\{[^{}]*\})?", " ", text)
    return any(w.lower() not in _ANSWER_WORDS for w in _SENTENCE_WORDS.findall(outside))


# -- escaped output ---------------------------------------------------------------------------

_COMMAND_NAMES = frozenset(
    lexer.FUNCTIONS | lexer.GREEK | set(lexer.RELATIONS) | set(lexer.SIMPLE) | lexer.WITH_ARGS | lexer.TEXT_COMMANDS
    | lexer.MATH_FONTS | {k for k in lexer.BRACKETS if k.isalpha()}
    | {"boxed", "fbox", "left", "right", "dfrac", "tfrac", "cfrac", "displaystyle", "pmatrix", "bmatrix", "infty"}
)
_DOUBLED = re.compile(r"(?<!\\)\\\\([A-Za-z]+)")
_SINGLE = re.compile(r"(?<!\\)\\([A-Za-z]+)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "", '"': '"', "'": "'", "\\": "\\"}


def unescape(text: str) -> str:
    """Undo one level of string escaping when the whole text is escaped.

    Escaped text writes every LaTeX command with a doubled backslash (``\\\\frac``) and line
    breaks as ``\\n``. It is recognised when some known command is doubled and none is written with
    a single backslash (a single backslash then only starts an escape: ``\\n``, ``\\t``, ``\\"``).
    Text that is not escaped is returned unchanged, so a LaTeX row break ``\\\\`` stays one."""
    if "\\\\" not in text:
        return text
    if not any(m.group(1) in _COMMAND_NAMES for m in _DOUBLED.finditer(text)):
        return text
    for m in _SINGLE.finditer(text):
        name = m.group(1)
        if name in _COMMAND_NAMES and name[0] not in "ntrbf":  # \n, \t ... are escapes, not commands
            return text
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), text, flags=re.S)
