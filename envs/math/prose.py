"""The final answer of a response written in prose: the lenient extraction mode.

Models evaluated without a box or an "answer is" marker state their result in a closing
sentence: "He spends 60 dollars altogether.", "so the chance that Bob wins is 3/5.", "the range
of the function is $(1,4]$.", "We get 7 + 8 = 15 marbles." This module finds that statement and
only that one; a number merely mentioned on the way (an earlier sentence, a value before the
verb, an intermediate step of a chain) is never taken.

Rules (`last_statement`):

1. The response is split into math segments (``$..$``, ``\\(..\\)`` on one line; ``$$..$$``,
   ``\\[..\\]``, ``align``-like environments over lines) and text. A ``$`` followed by a digit
   whose would-be math is prose is a currency sign, not math; inline math broken over lines is
   malformed and states nothing.
2. Text is cut into sentences at ``. ! ?`` followed by a space, at line breaks, and after math
   that ends with a full stop (``$$...= 2.$$ Therefore ...``).
3. From the last sentence backwards, the first one that mentions a value decides; sentences
   that are questions, checks ("Check: 2·5+3 = 13", "Verify ...") or set-ups ("Let $x$ be ...")
   are passed over. If the deciding sentence states no value unambiguously there is no answer
   (an earlier sentence is never used instead).
4. In that sentence the *candidates* are math segments, plain quantities (``3,250,000``,
   ``3/5``, ``45 percent``, ``7 + 8 = 15``) and numbers written as words up to ninety-nine. The answer is the first candidate after the last
   verb of statement (is, are, was, equals, =, gives, get, becomes, to, total of, ...) that has
   one; a candidate after a negation ("is not 10") is never the answer. Without such a verb a
   sentence with exactly one candidate states it; a sentence with several and no verb is
   ambiguous and gives no answer.
5. Of a plain quantity only the value is kept, with its percent sign: units and nouns after it
   ("dollars", "marbles") are dropped; of a chain ``7 + 8 = 15`` the value after the last ``=``.
   Arithmetic left undone in the text (``75-53``, ``68 * 8``) is an operation mentioned, not a
   value stated, so it is never the answer.
6. Given the question (`envs.math.forms.Question`), a restatement of it is not a value stated
   either: a candidate that is one of the question's expressions with an operation in it
   (``$75-53$``), or a number of the question after "the sum of", "the product of", ... ("The
   sum of 47 and 38 is unknown."; operands next to "plus", "times", ... are never values, rule 4).
   A sentence left with no candidate states nothing. Without a verb of statement, the question's
   numbers give way to the other values mentioned ("So in 4 weeks, he spends 36 hours." states
   36 when the question asked about 4 weeks); mentioned alone ("he recycles it in 2 days"), a
   number of the question stays the answer: it may well be the value.

Everything is linear in the response (regular expressions over a bounded tail).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envs.math.forms import Question

TAIL_CHARS = 6000
"""Only the last this-many characters are read (from a paragraph start when there is one)."""

MAX_SENTENCES = 40
"""Sentences examined from the end before giving up."""


@dataclass(frozen=True)
class Found:
    """An answer found in prose: its text and span in the response."""

    answer: str
    start: int
    end: int


_DELIMS = re.compile(
    r"\$\$|\\\[|\\\]|\\\(|\\\)|(?<!\\)\$|\\begin\{(?:align|equation|gather|eqnarray|multline)\*?\}|\\end\{(?:align|equation|gather|eqnarray|multline)\*?\}"
)
_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}\b")
_SENTENCE_END = re.compile(r"(?<!\b[A-Za-z])(?<!\.\.)[.!?](?=\s|$)|\n")
_NUMBER = r"[-−]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?"
_PERCENT = r"(?:\s*(?:%|\\%|percent\b|per\s+cent\b|pct\b|percentage\b|°|degrees?\b))?"
_UNIT_GLUED = r"(?:mm|cm|km|m|kg|mg|g|s|h|hr|min|ft|in|yd|mi|lb|oz|ml|l|L|mph|kph|am|pm|kb|Kb|KB|Mb|MB|Gb|GB)(?![A-Za-z0-9])"
_RUN_END = r"(?!,\d)(?:(?![\w.])|(?=\.(?!\d))|(?=" + _UNIT_GLUED + r"))"
"""A quantity ends at a non-word character or at a unit glued to it (``12cm``, ``1,000.99m²``,
``10pm``); ``3x`` is not a quantity (a variable follows), nor is ``4th`` (an ordinal)."""
_PLAIN_RUN = re.compile(
    r"(?<![\w.,])(?:[A-Za-z]\s*=\s*)?(?:\(\s*)*" + _NUMBER + _PERCENT
    + r"(?:\s*\)|\s*[-+*/×÷^=]\s*\(?\s*" + _NUMBER + _PERCENT + r")*" + _RUN_END
)
_ANCHOR = re.compile(
    r"(?i)(?<![\w])(?:is|are|was|were|be|becomes?|equals?|equal\s+to|gives?|get|gets|got|obtain|yields?|makes?|"
    r"totals?|total\s+of|sum\s+of|leaves|leaving|it's|that's)(?![\w'])|=|:(?=\s)"
)
_CONCLUSION = re.compile(r"(?i)(?:^|[,;]\s*|\s)(?:so|thus|therefore|hence|consequently|which\s+means|which\s+gives|meaning|giving|i\.e\.)(?:,)?\s")
"""Where the concluding clause of a sentence starts ("..., so Mia has 84 pencils")."""
_SUBORDINATE = re.compile(r"(?i)\s*(?:after|since|because|when|once|if|given|using|with|from|by|adding|subtracting|multiplying|dividing|combining)\b[^,]*,")
"""A leading subordinate clause ("After eating 3 of them, ..."): it sets up, it does not state."""
_JOINED = re.compile(r"(?i)^\s*(?:,|;|,?\s*and|,?\s*or)\s*$")
_NEGATION = re.compile(r"(?i)(?:\bnot|n't|\bcannot|\bnever|\bno\s+longer)(?:\s+[A-Za-z]+){0,2}\s*$")
_INDEX = re.compile(r"(?i)\b(?:steps?|case|part|problem|question|example|method|approach|option|figure|fig\.|table|equation|eq\.|"
                    r"section|chapter|page|lemma|theorem|line|row|column|round|stage|phase|level)\s*\(?$")
"""A number after these names a step or a part ("Step 5"), it is not a value."""
_LIST_MARKER = re.compile(r"(?m)^[ \t]*(?:[-*+#>]+[ \t]*)?\(?\d{1,3}[.)](?=[ \t]|$)")
"""``2. Add the numbers`` / ``3) ...``: an enumeration, neither a value nor a sentence end."""
_QUALIFIER = re.compile(r"(?i)\b(?:times|plus|minus|divided\s+by|multiplied\s+by|rather\s+than|at\s+least|at\s+most|more\s+than|less\s+than|greater\s+than|fewer\s+than|no\s+more\s+than|no\s+less\s+than|up\s+to|over|under|below|above|between|except|besides|other\s+than|instead\s+of)\s*$")
"""A value after these is a bound or an exception, not the value stated."""
_VERBAL_OPERATOR = re.compile(r"(?i)^\s*(?:times|plus|minus|divided|multiplied|over|squared|cubed|to\s+the|raised|more\s+than|less\s+than|of\s+(?:the\s+)?(?:remaining|rest))\b")
"""A value followed by these is an operand ("3 times 4"), not the result."""
_SKIP_START = re.compile(
    r"(?i)^\s*(?:\**\s*)?(?:let|suppose|assume|denote|where|check(?:ing)?|verify|verification|verifying|double[- ]check|"
    r"sanity|as\s+a\s+check|substituting\s+back|plugging\s+back|if\b)"
)
_UNITS_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD = re.compile(
    r"(?i)(?<![\w-])(?:(" + "|".join(_TENS_WORDS) + r")(?:[- ](" + "|".join(_UNITS_WORDS[1:10]) + r"))?|(" + "|".join(_UNITS_WORDS) + r"))(?![\w-])"
)
"""Numbers written as words, zero to ninety-nine ("there are twelve ways")."""
_NOT_A_NUMBER_WORD = re.compile(r"(?i)\s*(?:of\b|another\b|half|halves|thirds?\b|quarters?\b|fourths?\b|fifths?\b|sixths?\b|eighths?\b|tenths?\b|more\b|other\b|another\b|at\s+a\s+time)")
_PRONOUN_BEFORE = re.compile(r"(?i)\b(?:each|every|no|any|this|that|the|which|some|only)\s*$")
_UNIT_PERCENT = re.compile(r"(?i)^\s*(?:\\?%|percent\b|per\s+cent\b|pct\b|percentage\b)")


@dataclass(frozen=True)
class _Segment:
    kind: str  # "math" or "text"
    start: int  # of the content
    end: int


def _segments(text: str, base: int) -> list[_Segment]:
    """Math and text segments of ``text`` (offsets shifted by ``base``)."""
    out: list[_Segment] = []
    pos = 0
    for m in _DELIMS.finditer(text):
        if m.start() < pos:
            continue
        opener = m.group(0)
        if opener.startswith("\\end") or opener in ("\\]", "\\)"):
            continue
        if opener.startswith("\\begin"):
            close = text.find(opener.replace("\\begin", "\\end"), m.end())
        else:
            close = text.find(_CLOSER[opener], m.end())
            while opener == "$" and close > 0 and text[close - 1] == "\\":
                close = text.find("$", close + 1)
        if close < 0:
            continue
        content = text[m.end(): close]
        if opener in ("$", "\\(") and "\n" in content:
            if _PROSE_WORD.search(_strip_text_commands(content)):
                continue  # an unpaired "$" (a currency sign): read on
            # inline math broken over lines ("$ \n 9 \n $"): malformed, so nothing in it is stated
            if m.start() > pos:
                out.append(_Segment("text", base + pos, base + m.start()))
            out.append(_Segment("broken", base + m.end(), base + close))
            pos = close + len(_CLOSER[opener])
            continue
        if opener == "$" and content[:1].isdigit() and _PROSE_WORD.search(_strip_text_commands(content)):
            continue  # "$10,200 + $255 = $10,455. The answer": currency, not math
        if m.start() > pos:
            out.append(_Segment("text", base + pos, base + m.start()))
        out.append(_Segment("math", base + m.end(), base + close))
        pos = close + (len(opener.replace("\\begin", "\\end")) if opener.startswith("\\begin") else len(_CLOSER[opener]))
    if pos < len(text):
        out.append(_Segment("text", base + pos, base + len(text)))
    return out


def _strip_text_commands(s: str) -> str:
    return re.sub(r"\\[A-Za-z]+(?:\{[^{}]*\})?", " ", s)


def _sentences(response: str, segments: list[_Segment]) -> list[list[_Segment]]:
    """Segments grouped into sentences (text segments are split at sentence ends)."""
    sentences: list[list[_Segment]] = [[]]
    markers = _list_markers(response, segments)
    for seg in segments:
        if seg.kind != "text":
            sentences[-1].append(seg)
            content = response[seg.start: seg.end].rstrip()
            if seg.kind == "math" and content.endswith((".", "!", "?")) and not content.endswith(".."):
                sentences.append([])  # "$x = 3.$ Then ...": the sentence ended inside the math
            continue
        pos = seg.start
        chunk = response[seg.start: seg.end]
        for m in _SENTENCE_END.finditer(chunk):
            end = seg.start + m.start()
            if any(a <= end < b for a, b in markers):
                continue  # the full stop of "2. Add ..." ends no sentence
            if end > pos:
                sentences[-1].append(_Segment("text", pos, end))
            if response[end] == "?":
                sentences[-1].append(_Segment("question", end, end + 1))
            sentences.append([])
            pos = seg.start + m.end()
        if pos < seg.end:
            sentences[-1].append(_Segment("text", pos, seg.end))
    return [s for s in sentences if s]


@dataclass(frozen=True)
class _Candidate:
    start: int
    end: int
    answer: str
    plain: bool = False
    """Written in the text (not in math delimiters)."""
    result: bool = False
    """The value after the last ``=`` of a chain (``7 + 8 = 15``): a result, never a mention."""


def _list_markers(response: str, segments: list[_Segment]) -> list[tuple[int, int]]:
    spans = []
    for seg in segments:
        if seg.kind == "text":
            spans.extend((seg.start + m.start(), seg.start + m.end()) for m in _LIST_MARKER.finditer(response[seg.start: seg.end]))
    return spans


def _candidates(response: str, sentence: list[_Segment]) -> list[_Candidate]:
    out: list[_Candidate] = []
    for k, seg in enumerate(sentence):
        if seg.kind == "math":
            content = response[seg.start: seg.end].strip()
            if not content:
                continue
            answer = content
            nxt = sentence[k + 1] if k + 1 < len(sentence) else None
            if nxt is not None and nxt.kind == "text" and _UNIT_PERCENT.match(response[nxt.start: nxt.end]):
                answer = content + "\\%"  # "$28$ percent"
            out.append(_Candidate(seg.start, seg.end, answer))
        elif seg.kind == "text":
            chunk = response[seg.start: seg.end]
            for m in _PLAIN_RUN.finditer(chunk):
                run = m.group(0).strip()
                if not re.search(r"\d", run):
                    continue
                if _INDEX.search(chunk, 0, m.start()) or _is_list_marker(response, seg.start + m.start(), seg.start + m.end()):
                    continue
                out.append(_Candidate(seg.start + m.start(), seg.start + m.end(), _plain_value(run), plain=True, result="=" in run))
            for m in _NUMBER_WORD.finditer(chunk):
                if _NOT_A_NUMBER_WORD.match(chunk, m.end()) or _PRONOUN_BEFORE.search(chunk, 0, m.start()):
                    continue  # "one of them", "one half", "each one": not a count
                value = _word_value(m)
                out.append(_Candidate(seg.start + m.start(), seg.start + m.end(), str(value)))
    out.sort(key=lambda c: c.start)
    return out


def _word_value(m: re.Match) -> int:
    if m.group(3):
        return _UNITS_WORDS.index(m.group(3).lower())
    value = 10 * (_TENS_WORDS.index(m.group(1).lower()) + 2)
    return value + (_UNITS_WORDS.index(m.group(2).lower()) if m.group(2) else 0)


def _is_list_marker(response: str, start: int, end: int) -> bool:
    line_start = response.rfind("\n", 0, start) + 1
    m = _LIST_MARKER.match(response, line_start)
    return m is not None and m.start() <= start < m.end()


def _plain_value(run: str) -> str:
    """``7 + 8 = 15`` → ``15``; ``$12`` → ``12``; ``45 percent`` → ``45 percent``; ``45°`` → ``45°``."""
    if "=" in run:
        run = run.rsplit("=", 1)[1]
    return run.replace("$", "").replace("−", "-").strip()


def _anchors(response: str, sentence: list[_Segment], cands: list[_Candidate]) -> list[int]:
    """Positions just after each verb of statement (an ``=`` inside a quantity is not one)."""
    out = []
    for seg in sentence:
        if seg.kind != "text":
            continue
        chunk = response[seg.start: seg.end]
        for m in _ANCHOR.finditer(chunk):
            at = seg.start + m.start()
            if not any(c.start <= at < c.end for c in cands):
                out.append(seg.start + m.end())
    return out


def _negated(response: str, cand: _Candidate, sentence_start: int) -> bool:
    """A value that is denied ("is not 10"), bounded ("at least 5") or an operand ("3 times 4")."""
    before = re.sub(r"\$", " ", response[max(sentence_start, cand.start - 40): cand.start]).rstrip()
    after = re.sub(r"\$", " ", response[cand.end: cand.end + 40])
    return bool(_NEGATION.search(before) or _QUALIFIER.search(before) or _VERBAL_OPERATOR.match(after))


_UNDONE = re.compile(r"\d\s*\)?\s*[-+*×÷^]\s*\(?\s*[-−]?\$?\s?\d")
"""Two numbers joined by an operator: ``75-53``, ``68 * 8``, ``(3+4)``."""
_OPERATION = re.compile(r"[-+*/^!=<>]|\\(?:cdot|times|div|binom|dbinom|tbinom|pm)(?![A-Za-z])")
"""What makes a restated expression an operation to carry out (a lone ``\\sqrt{53}`` may be the
answer a question names; the checker's own rule judges it)."""


_OPERANDS_FOLLOW = re.compile(r"(?i)\b(?:sum|product|difference|quotient|ratio)\s+(?:of|between)\s+(?:\$?[\d.,]+\$?\s*(?:,|and)\s*)*$")
"""After these come operands ("the sum of 47 and 38"): the question's numbers there are not stated."""


def _named_operand(response: str, cand: _Candidate, question: Question | None) -> bool:
    """A number of the question named as an operand ("the sum of 47 and 38"), not stated."""
    return (question is not None and not cand.result and question.mentions(cand.answer)
            and _OPERANDS_FOLLOW.search(response, max(0, cand.start - 60), cand.start) is not None)


def _restated(cand: _Candidate, question: Question | None) -> bool:
    """An operation mentioned rather than a value stated (rules 5 and 6)."""
    if cand.plain and _UNDONE.search(cand.answer):
        return True
    return question is not None and _OPERATION.search(cand.answer.lstrip("-+−")) is not None and question.restates(cand.answer)


AMBIGUOUS = Found("", -1, -1)
"""A sentence that mentions several values and states none of them."""


def statement_answer(response: str, sentence: list[_Segment], question: Question | None = None) -> Found | None:
    """The value a sentence states (rules 4-6 of the module docstring), `AMBIGUOUS`, or None when
    it mentions no value."""
    every = _candidates(response, sentence)
    cands = [c for c in every if not _negated(response, c, sentence[0].start) and not _restated(c, question)
             and not _named_operand(response, c, question)]
    if not cands:
        return AMBIGUOUS if every else None
    start = _main_clause_start(response, sentence, cands)
    if start is not None:
        every = [c for c in every if c.start >= start]
        cands = [c for c in cands if c.start >= start]
    anchors = _anchors(response, sentence, every)
    if start is not None:
        anchors = [a for a in anchors if a >= start]
    for a in reversed(anchors):
        after = [c for c in cands if c.start >= a]
        if after:
            group = _joined(response, after)
            later = [c for c in after if c.start >= group.end]
            if any(re.search(r"(?i)\band\b", response[group.end: c.start]) for c in later):
                return AMBIGUOUS  # "is 20 cm long and 5 cm wide": two values stated
            return group
    if question is not None:  # no verb: of the values mentioned, the question's own are not the answer
        new = [c for c in cands if c.result or not question.mentions(c.answer)]
        cands = new or cands  # ... unless nothing else is mentioned ("he recycles it in 2 days")
    if len(cands) == 1:
        c = cands[0]
        return Found(c.answer, c.start, c.end)
    group = _joined(response, cands)
    if group.end == cands[-1].end:  # "$x = 5$ or $x = -5$": all values joined into one answer
        return group
    return AMBIGUOUS


def _main_clause_start(response: str, sentence: list[_Segment], cands: list[_Candidate]) -> int | None:
    """Where the clause that states the result starts: after the last "so"/"thus"/"therefore"
    followed by a value, else after a leading subordinate clause; None for the whole sentence."""
    text_segs = [s for s in sentence if s.kind == "text"]
    for seg in reversed(text_segs):
        for m in reversed(list(_CONCLUSION.finditer(response, seg.start, seg.end))):
            if any(c.start >= m.end() for c in cands):
                return m.end()
    if sentence[0].kind == "text":
        m = _SUBORDINATE.match(response, sentence[0].start, sentence[-1].end)
        if m and any(c.start >= m.end() for c in cands):
            return m.end()
    return None


def _joined(response: str, after: list[_Candidate]) -> Found:
    """The first candidate and those joined to it by "and", "or" or commas ("are 3 and -4")."""
    group = [after[0]]
    for c in after[1:]:
        if not _JOINED.match(re.sub(r"\$", " ", response[group[-1].end: c.start])):
            break
        group.append(c)
    return Found(", ".join(c.answer for c in group), group[0].start, group[-1].end)


def last_statement(response: str, question: Question | None = None) -> Found | None:
    """The final answer stated in prose (see module docstring), or None."""
    base = max(0, len(response) - TAIL_CHARS)
    if base:
        para = response.find("\n\n", base)
        base = para + 2 if 0 <= para < len(response) - 1 else base
    sentences = _sentences(response, _segments(response[base:], base))
    for sentence in reversed(sentences[-MAX_SENTENCES:]):
        if any(s.kind == "question" for s in sentence):
            continue
        first = response[sentence[0].start: sentence[0].end] if sentence[0].kind == "text" else ""
        if _SKIP_START.match(first):
            continue
        found = statement_answer(response, sentence, question)
        if found is AMBIGUOUS:
            return None  # the closing statement is unclear: an earlier value is not the answer
        if found is not None:
            return found
    return None


def sentence_value(text: str, question: Question | None = None) -> Found | None:
    """The value stated by one sentence (an "answer is" marker followed by prose: "The largest
    $n$ is 34"), or None when it states none unambiguously."""
    segments = _segments(text, 0)
    sentences = _sentences(text, segments)
    if not sentences:
        return None
    found = statement_answer(text, sentences[0], question)
    return None if found is AMBIGUOUS else found
