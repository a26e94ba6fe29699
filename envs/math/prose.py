"""The final answer of a response written in prose: the lenient extraction mode.

Models evaluated without a box or an "answer is" marker state their result in a closing
sentence: "He spends 60 dollars altogether.", "so the chance that Bob wins is 3/5.", "the range
of the function is $(1,4]$.", "We get 7 + 8 = 15 marbles." This module finds that statement and
only that one; a number merely mentioned on the way (an earlier sentence, a value before the
verb, an intermediate step of a chain) is never taken.

Rules (`last_statement`):

1. The response is split into math segments (``$..$``, ``\\(..\\)`` on one line; ``$$..$$``,
   ``\\[..\\]``, ``align``-like environments over lines) and text. A ``$`` is currency unless it
   opens a real LaTeX span (`envs.math.commit.is_math_span`: ``$12 or $15``, ``$25 per day`` are
   amounts); inline math broken over lines is malformed and states nothing.
2. Text is cut into sentences at ``. ! ?`` followed by a space, also behind closing quotes,
   brackets or emphasis (``"103." This``), at line breaks, and after math that ends with a full
   stop (``$$...= 2.$$ Therefore ...``).
3. From the last sentence backwards, the first one that mentions a value decides; sentences
   that are questions, checks ("Check: 2·5+3 = 13", "Verify ...") or set-ups ("Let $x$ be ...")
   are passed over, and so are, given the question, sentences copied from it ("Tom has 12
   apples.", `envs.math.commit.copied`) and sentences that only restate its operands or
   expressions ("This is the sum of 22 and 81.", "We add 22 and 81."). If the deciding sentence
   states no value unambiguously, or gives up ("The answer to 75-53 is unknown to me."), there
   is no answer (an earlier sentence is never used instead). A response that stops while
   announcing more work ("Next, we calculate") or whose deciding sentence is a repetition loop
   (written `LOOP_REPEATS` times) never concluded: no answer.
4. In that sentence the *candidates* are math segments, plain quantities (``3,250,000``,
   ``3/5``, ``45 percent``, ``7 + 8 = 15``) and numbers written as words (`envs.math.numwords`);
   those in a remark in words ("(3 red and 1 green)") are set aside. The answer is the first
   candidate after the last verb of statement (is, are, was, equals, =, gives, get, becomes,
   results in, total of, ...) that has one, with the candidates joined to it (rule 7); a
   candidate that is denied ("is not 10"), bounded ("at least 5", "12 or more"), the start of a
   change ("from 5 to 8") or an operand ("3 times 4", "25% of 80", "cost * 2") is never the
   answer. Without such a verb a sentence with exactly one candidate states it; a sentence with
   several and no verb is ambiguous and gives no answer.
5. Of a plain quantity only the value is kept, with its percent sign: units and nouns after it
   ("dollars", "marbles") are dropped; of a chain ``7 + 8 = 15`` the value after the last ``=``.
   Arithmetic left undone in the text (``75-53``, ``68 * 8``) is an operation mentioned, not a
   value stated, so it is never the answer.
6. Given the question (`envs.math.forms.Question`), a restatement of it is not a value stated
   either: a candidate that is one of the question's expressions with an operation in it
   (``$75-53$``), a number of the question after "the sum of", "the product of", ..., or one
   written beside the word the question writes beside it ("So, 2 boxes" for "buys 2 boxes").
   Without a verb of statement, the question's numbers give way to the other values mentioned
   ("So in 4 weeks, he spends 36 hours." states 36 when the question asked about 4 weeks);
   mentioned alone in other words ("he recycles it in 2 days"), a number of the question stays
   the answer: it may well be the value. As the subject of a verb ("24 is a special number") it
   is stated only when the answer is named ("So 24 is the answer.").
7. Values joined by "and", "or", commas, a range ("10 to 20", "between 10 and 20") or a slash
   between amounts, two values of one clause joined by "or" ("Either she makes 18 or she makes
   32"), and a closing sentence offering an alternative to the one before ("It could also be
   15.") are all offered: ``Found.parts`` holds them, a hedge where the gold is one value
   (`envs.math.commit`). Mentions of one value ("36/3, or 12") are that value.

`answer_value` reads an answer span (the text after "Answer:") with the same rules, its start
counting as a verb of statement.

Everything is linear in the response (regular expressions over a bounded tail).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from envs.math import commit, numwords
from envs.math.forms import Question, is_numeric_literal

TAIL_CHARS = 6000
"""Only the last this-many characters are read (from a paragraph start when there is one)."""

MAX_SENTENCES = 40
"""Sentences examined from the end before giving up."""


@dataclass(frozen=True)
class Found:
    """An answer found in prose: its text and span in the response.

    Attributes:
        answer: The value (several joined with ", " when more than one is offered).
        start, end: Its span in the response.
        parts: The values when several are offered ("12 or 15", "between 10 and 20", "3 and -4"):
            a hedge where the gold is one value (`envs.math.commit`); empty for one value.
        spelled: The words of a number written as words ("eight"), whose digits are ``answer``.
        rule: Which rule decided, in words (``rlvr verify --explain`` prints it).
    """

    answer: str
    start: int
    end: int
    parts: tuple[str, ...] = ()
    spelled: str | None = None
    rule: str = ""


_DELIMS = re.compile(
    r"\$\$|\\\[|\\\]|\\\(|\\\)|(?<!\\)\$|\\begin\{(?:align|equation|gather|eqnarray|multline)\*?\}|\\end\{(?:align|equation|gather|eqnarray|multline)\*?\}"
)
_CLOSER = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}
_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}\b")
_SENTENCE_END = re.compile(r"(?<!\b[A-Za-z])(?<!\.\.)[.!?][\"'”’)\]*_]*(?=\s|$)|\n")
"""A sentence ends at ``. ! ?`` before a space, also behind closing quotes, brackets or emphasis
(``the total is "103." Then``), and at a line break."""
_NUMBER = r"(?:[-−](?=\$?\d))?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?"
_PERCENT = r"(?:\s*(?:%|\\%|percent\b|per\s+cent\b|pct\b|percentage\b|°|degrees?\b))?"
_UNIT_GLUED = r"(?:mm|cm|km|m|kg|mg|g|s|h|hr|min|ft|in|yd|mi|lb|oz|ml|l|L|mph|kph|am|pm|kb|Kb|KB|Mb|MB|Gb|GB)(?![A-Za-z0-9])"
_RUN_END = r"(?!,\d)(?:(?![\w.])|(?=\.(?!\d))|(?=" + _UNIT_GLUED + r"))"
"""A quantity ends at a non-word character or at a unit glued to it (``12cm``, ``1,000.99m²``,
``10pm``); ``3x`` is not a quantity (a variable follows), nor is ``4th`` (an ordinal)."""
_PLAIN_RUN = re.compile(
    r"(?<![\w.,])(?:[A-Za-z]\s*=\s*)?(?:\(\s*)*" + _NUMBER + _PERCENT
    + r"(?:\s*\)|(?:\s*[-+*×÷^=]\s*|\s+x\s+)\(?\s*" + _NUMBER + _PERCENT + r"|\s*/\s*\(?\s*" + _NUMBER.replace(r"\$?\s?", "") + _PERCENT + r")*"
    + _RUN_END
)
"""A quantity or a chain of them: ``3,250,000``, ``45 percent``, ``7 + 8 = 15``, ``$10 + $5 = $15``;
a slash before a dollar amount separates two amounts (``$12/$15``), it divides nothing."""
_ANCHOR = re.compile(
    r"(?i)(?<![\w])(?:is|are|was|were|be|becomes?|equals?|equal\s+to|equall?ing|gives?|get|gets|got|obtain|yields?|makes?|"
    r"(?<!\bin\s)totals?|total\s+of|sum\s+of|adds?\s+up\s+to|added\s+up\s+to|leaves|leaving|it's|that's|results?\s+in|resulting\s+in|comes?\s+to|came\s+to|amounts?\s+to)(?![\w'])|=|:(?=\s)"
)
_CONCLUSION = re.compile(r"(?i)(?:^|[,;]\s*|\s)(?:so|thus|therefore|hence|consequently|which\s+means|which\s+gives|meaning|giving|i\.e\.)(?:,)?\s")
"""Where the concluding clause of a sentence starts ("..., so Mia has 84 pencils")."""
_SUBORDINATE = re.compile(r"(?i)\s*(?:after|since|because|when|once|if|given|using|with|from|by|adding|subtracting|multiplying|dividing|combining)\b[^,]*,")
"""A leading subordinate clause ("After eating 3 of them, ..."): it sets up, it does not state."""
_NEGATION = re.compile(r"(?i)(?:\bnot|n't|\bcannot|\bnever|\bno\s+longer)(?:\s+[A-Za-z]+){0,2}\s*$")
_INDEX = re.compile(r"(?i)\b(?:steps?|case|part|problem|question|example|method|approach|option|figure|fig\.|table|equation|eq\.|"
                    r"section|chapter|page|lemma|theorem|line|row|column|round|stage|phase|level)\s*\(?$")
"""A number after these names a step or a part ("Step 5"), it is not a value."""
_LIST_MARKER = re.compile(r"(?m)^[ \t]*(?:[-*+#>]+[ \t]*)?\(?\d{1,3}[.)](?=[ \t]|$)")
"""``2. Add the numbers`` / ``3) ...``: an enumeration, neither a value nor a sentence end."""
_QUALIFIER = re.compile(r"(?i)\b(?:rather\s+than|at\s+least|at\s+most|more\s+than|less\s+than|greater\s+than|fewer\s+than|no\s+more\s+than|no\s+less\s+than|(?<!\badd\s)(?<!\badds\s)(?<!added\s)up\s+to|over|under|below|above|except|besides|other\s+than|instead\s+of)\s*$")
"""A value after these is a bound or an exception, not the value stated ("between 10 and 20" is
a range: two values offered, `envs.math.commit`)."""
_CHANGED_FROM = re.compile(
    r"(?i)\b(?:increas|decreas|ris|rose|fell|fall|grow|grew|drop|went|goes|go|chang|round|reduc|rais|jump|climb|mov|convert|shrink|shrank|cut)"
    r"\w*(?:\s+[A-Za-z]+){0,3}\s+from\s*$"
)
"""The starting value of a change ("rose from 5 to 8", "rounding 4.6 ... from"): not the value stated."""
_VERBAL_OPERATOR = re.compile(r"(?i)^\s*(?:[A-Za-z]+\s+){0,2}?(?:times|plus|minus|divided|multiplied|added|subtracted|combined|squared|cubed|to\s+the|raised)\b"
                              r"|^\s*(?:over|more\s+than|less\s+than|of\s+(?:the\s+)?(?:remaining|rest))\b")
"""A value followed by these is an operand ("3 times 4", "44 subtracted with 26"), not the result."""
_UNFINISHED = re.compile(r"\s*[-+*/×÷^=]\s*$")
"""A value followed by an operator and nothing else ("... is 80 + " cut off): an unfinished
expression, not a value."""
_OPERAND_BEFORE = re.compile(r"(?i)(?:%|\bpercent|\bhalf|\bthirds?|\bquarters?|\bfraction)\s+of\s*$|(?:(?<!\*)\*|[×÷^+]|(?<=[A-Za-z)])\s*/)\s*$|"
                             r"\b(?:times|plus|minus|divided\s+by|multiplied\s+by|(?:added|subtracted|multiplied|divided|combined)\s+(?:to|from|with|by|and|into)|"
                             r"(?:add(?!s?\s+up)|adding(?!\s+up)|subtract|subtracting|multiply|multiplying|divide|dividing)(?:\s+[A-Za-z]+){0,2}\s+(?:to|from|with|by|and|into))\s*$")
"""A value after these is an operand ("3 times 4", "subtracted from 26", "add 5 to 10", "25% of 80",
"the total cost * 2")."""
_GIVES_UP = re.compile(r"(?i)\b(?:unknown|not\s+sure|unsure|(?:don't|do\s+not|doesn't|does\s+not)\s+know|no\s+idea|unable\s+to|not\s+(?:able|possible)\s+to|"
                       r"(?:cannot|can't|can\s+not)\s+(?:be\s+)?(?:solve|determine|compute|calculate|find|answer|finish|tell)\w*)")
""""The answer to 75-53 is unknown to me.", "I cannot finish.": a closing sentence that gives up
states no answer, whatever an earlier sentence said."""
_OPERATOR_AFTER = re.compile(r"(?i)^\s*(?:[A-Za-z]+\s+){0,2}?(?:\*(?!\*)|[×÷^]|\+(?=\s*[\d(]))")
"""A value followed (after its unit) by an operator: "12 candles * 1" is an operand."""
_BOUND_AFTER = re.compile(r"(?i)^\s*(?:[A-Za-z]+\s+){0,2}?,?\s*or\s+(?:more|less|fewer|greater|higher|lower|so|above|below|over|under|longer|shorter)\b")
""""12 or more", "5 or so": a bound or an estimate, not a value committed to."""
_SKIP_START = re.compile(
    r"(?i)^\s*(?:\**\s*)?(?:let|suppose|assume|denote|where|check(?:ing)?|verify|verification|verifying|double[- ]check|"
    r"sanity|as\s+a\s+check|substituting\s+back|plugging\s+back|if\b)"
)
_NOT_A_NUMBER_WORD = re.compile(r"(?i)\s*(?:of\b|another\b|halves|thirds?\b|quarters?\b|fourths?\b|fifths?\b|sixths?\b|eighths?\b|tenths?\b|more\b|other\b|another\b|at\s+a\s+time)")
_PRONOUN_BEFORE = re.compile(r"(?i)\b(?:each|every|no|any|this|that|these|those|the|which|some|only|both|all|first|last|next|other|our|their)\s*$")
"""Before a number word these make it a count of things named ("these two values", "the first
one"), not a value stated."""
_UNIT_PERCENT = re.compile(r"(?i)^\s*(?:\\?%|percent\b|per\s+cent\b|pct\b|percentage\b)")
_AND_ANOTHER = re.compile(r"(?i)[^\d.;:!?]{0,40}?\band\s+(?:\$\s?)?$")
"""Between two values: "and" after at most a few words ("20 cm long and 5"), not a clause ("— I
subtracted 90 and 14")."""
_ANSWER_NOUN = re.compile(r"(?i)\s*(?:indeed\s+|also\s+|therefore\s+|thus\s+)?(?:the|our|my|your)\s+(?:final\s+|correct\s+|right\s+|exact\s+)?"
                          r"(?:answer|result|solution|product|sum|total|difference|quotient|value|outcome)\b")
"""A verb followed by these states its subject ("So 73 is the answer.", "32 is the product of ...")."""
_RANGE_BEFORE = re.compile(r"(?i)\b(?:between|from|range[sd]?\s+(?:from\s+)?|anywhere\s+from|somewhere\s+between)\s*\$?\s*$")


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
        if opener == "$" and not commit.is_math_span(content, text[close + 1: close + 2]):
            continue  # "$10,200 + $255 = $10,455", "$12 or $15": currency, not math
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
    spelled: str | None = None
    """The words of a number written as words."""


def _list_markers(response: str, segments: list[_Segment]) -> list[tuple[int, int]]:
    spans = []
    for seg in segments:
        if seg.kind == "text":
            spans.extend((seg.start + m.start(), seg.start + m.end()) for m in _LIST_MARKER.finditer(response[seg.start: seg.end]))
    return spans


def _candidates(response: str, sentence: list[_Segment]) -> list[_Candidate]:
    """The values a sentence mentions, in order; those inside a remark in words ("(3 red and 1
    green)") are left out (`envs.math.commit.remarks`)."""
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
                run, at = m.group(0), m.start()
                while run.startswith("(") and run.count("(") > run.count(")"):  # "(15 if ...": the bracket opens a remark
                    stripped = run[1:].lstrip()
                    at += len(run) - len(stripped)
                    run = stripped
                run = run.strip()
                while run.endswith(")") and run.count(")") > run.count("("):  # "(could be 34)": the bracket closes an aside
                    run = run[:-1].rstrip()
                if not _DIGIT.search(run):
                    continue
                if _INDEX.search(chunk, 0, at) or _is_list_marker(response, seg.start + at, seg.start + m.end()):
                    continue
                out.append(_Candidate(seg.start + at, seg.start + m.end(), _plain_value(run), plain=True, result="=" in run))
            for w in numwords.find(chunk):
                if _NOT_A_NUMBER_WORD.match(chunk, w.end) or _PRONOUN_BEFORE.search(chunk, 0, w.start):
                    continue  # "one of them", "each one": not a count
                out.append(_Candidate(seg.start + w.start, seg.start + w.end, w.digits, spelled=chunk[w.start: w.end]))
    if out:
        lo, hi = sentence[0].start, sentence[-1].end
        aside = [(lo + a, lo + b) for a, b in commit.remarks(response[lo:hi])]
        out = [c for c in out if not any(a <= c.start < b for a, b in aside)]
    out.sort(key=lambda c: c.start)
    return out


def _is_list_marker(response: str, start: int, end: int) -> bool:
    line_start = response.rfind("\n", 0, start) + 1
    m = _LIST_MARKER.match(response, line_start)
    return m is not None and m.start() <= start < m.end()


def _plain_value(run: str) -> str:
    """``7 + 8 = 15`` → ``15``; ``$12`` → ``12``; ``45 percent`` → ``45 percent``; ``45°`` → ``45°``."""
    if "=" in run:
        run = run.rsplit("=", 1)[1]
    return run.replace("$", "").replace("−", "-").strip()


def _anchors(response: str, sentence: list[_Segment], cands: list[_Candidate]) -> list[tuple[int, str]]:
    """Each verb of statement: the position just after it and its words (an ``=`` inside a
    quantity is not one)."""
    out = []
    for seg in sentence:
        if seg.kind != "text":
            continue
        chunk = response[seg.start: seg.end]
        for m in _ANCHOR.finditer(chunk):
            at = seg.start + m.start()
            if not any(c.start <= at < c.end for c in cands):
                out.append((seg.start + m.end(), m.group(0)))
    return out


def _negated(response: str, cand: _Candidate, sentence_start: int) -> str | None:
    """``denied`` for a value that is denied ("is not 10"), bounded ("at least 5", "12 or more")
    or the start of a change ("from 5 to 8"); ``operand`` for an operand ("3 times 4", "add 5 to
    10"); None for a value that may be stated."""
    before = response[max(sentence_start, cand.start - 40): cand.start].replace("$", " ").rstrip()
    after = response[cand.end: cand.end + 40].replace("$", " ")
    words = before[-30:].lower().split()[-3:]  # the patterns end in one of these words: run them only then
    last = words[-1] if words else ""
    if cand.plain and last in _DEFINITE and _NOUN_AFTER.match(after):
        return "operand"  # "is left in the 10 liters": a quantity referred to, not a value stated
    if (any(w in _NEGATION_WORDS or w.endswith("n't") for w in words) and _NEGATION.search(before)) \
            or (last in _QUALIFIER_ENDS and _QUALIFIER.search(before)) or (last == "from" and _CHANGED_FROM.search(before)) \
            or _BOUND_AFTER.match(after):
        return "denied"
    if ((last in _OPERAND_ENDS or before[-1:] in _OPERATOR_CHARS) and _OPERAND_BEFORE.search(before)) \
            or _VERBAL_OPERATOR.match(after) or _OPERATOR_AFTER.match(after) or _UNFINISHED.match(response, cand.end, min(len(response), cand.end + 40)) \
            or _UNFINISHED.match(after.split("\n", 1)[0]) and "\n" in after:
        return "operand"
    return None


_NEGATION_WORDS = frozenset({"not", "cannot", "never", "longer"})
_DEFINITE = frozenset({"the", "these", "those", "his", "her", "their", "its", "our", "my", "your"})
_NOUN_AFTER = re.compile(r"\s*[A-Za-z]{2,}")
_QUALIFIER_ENDS = frozenset({"than", "least", "most", "to", "over", "under", "below", "above", "except", "besides", "of"})
_OPERAND_ENDS = frozenset({"of", "times", "plus", "minus", "by", "to", "from", "with", "and", "into"})
_OPERATOR_CHARS = frozenset("*×÷^+/")


_UNDONE = re.compile(r"\d\s*\)?\s*(?:[-+*×÷^]|\s[x]\s)\s*\(?\s*[-−]?\$?\s?\d")
"""Two numbers joined by an operator: ``75-53``, ``68 * 8``, ``(3+4)``, ``55 x 53``."""
_OPERATION = re.compile(r"[-+*/^!=<>]|\\(?:cdot|times|div|binom|dbinom|tbinom|pm)(?![A-Za-z])")
"""What makes a restated expression an operation to carry out (a lone ``\\sqrt{53}`` may be the
answer a question names; the checker's own rule judges it)."""


_OPERANDS_FOLLOW = re.compile(r"(?i)\b(?:sum|product|difference|quotient|ratio)\s+(?:of|between)\s+(?:\$?[\d.,]+\$?\s*(?:,|and)\s*)*$")
"""After these come operands ("the sum of 47 and 38"): the question's numbers there are not stated."""


def _named_operand(response: str, cand: _Candidate, question: Question | None) -> bool:
    """A number of the question named as an operand ("the sum of 47 and 38"), not stated."""
    return (question is not None and not cand.result and question.mentions(cand.answer)
            and _OPERANDS_FOLLOW.search(response, max(0, cand.start - 60), cand.start) is not None)


def _of_the_question(cand: _Candidate, question: Question) -> bool:
    """Whether a restated candidate is made of the question's expression or numbers only."""
    if question.restates(cand.answer) or question.mentions(cand.answer):
        return True
    numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", cand.answer)
    return bool(numbers) and all(question.mentions(n) for n in numbers)


def _restated(cand: _Candidate, question: Question | None) -> bool:
    """An operation mentioned rather than a value stated (rules 5 and 6)."""
    if cand.plain and _UNDONE.search(cand.answer):
        return True
    return question is not None and _OPERATION.search(cand.answer.lstrip("-+−")) is not None and question.restates(cand.answer)


_DIGIT = re.compile(r"\d")


def _with_rule(found: Found, rule: str) -> Found:
    """``found`` with its rule set (built directly: `dataclasses.replace` costs more on this path)."""
    return Found(found.answer, found.start, found.end, found.parts, found.spelled, rule)


class _Sentinel(Found):
    pass


AMBIGUOUS = _Sentinel("", -1, -1, rule="ambiguous")
"""A sentence that mentions several values and states none of them."""
RESTATES = _Sentinel("", -1, -1, rule="restates operands")
"""A sentence that only restates the question's operands or expressions ("This is the sum of 22
and 81."): passed over for the sentence before it."""
COPIED = _Sentinel("", -1, -1, rule="copied from the question")
"""A sentence copied from the question (`envs.math.commit.copied`): passed over."""


def _exclusions(response: str, every: list[_Candidate], sentence_start: int, question: Question | None) -> list[str | None]:
    """Why each candidate is not a value stated (``negated`` or ``restated``), or None. A value
    joined to a denied one is denied with it ("not 12 or 15")."""
    out: list[str | None] = []
    for k, c in enumerate(every):
        kind = _negated(response, c, sentence_start)
        if kind == "operand" and question is not None and question.mentions(c.answer):
            out.append("restated")  # "That is 44 subtracted from 26": the question's operands
        elif kind:
            out.append("negated")
        elif _restated(c, question) or _named_operand(response, c, question):
            # the question's own expression or operands; arithmetic of other numbers left undone ("The profit is 25 - 1")
            out.append("restated" if question is not None and _of_the_question(c, question) else "negated")
        elif k and out[-1] == "negated" and commit.joined_by(response[every[k - 1].end: c.start].replace("$", " ")) in ("or", "list"):
            out.append("negated")
        else:
            out.append(None)
    return out


def statement_answer(response: str, sentence: list[_Segment], question: Question | None = None, *,
                     anchored: bool = False) -> Found | None:
    """The value a sentence states (rules 4-6 of the module docstring), `AMBIGUOUS`, `RESTATES`,
    or None when it mentions no value. ``anchored``: the sentence is an answer span (the text
    after "Answer:"), so a value at its start is stated."""
    every = _candidates(response, sentence)
    why = _exclusions(response, every, sentence[0].start, question)
    cands = [c for c, w in zip(every, why) if w is None]
    if not cands:
        if every and all(w == "restated" for w in why):
            return RESTATES
        return AMBIGUOUS if every else None
    start = _main_clause_start(response, sentence, cands)
    if start is not None:
        every = [c for c in every if c.start >= start]
        cands = [c for c in cands if c.start >= start]
    anchors = _anchors(response, sentence, every)
    if "(" in response[sentence[0].start: sentence[-1].end]:  # a verb inside brackets is an aside's: "12 (could be 15)"
        lo = sentence[0].start
        brackets = [(lo + a, lo + b) for a, b in commit.brackets(response[lo: sentence[-1].end])]
        anchors = [(a, verb) for a, verb in anchors if not any(x <= a < y for x, y in brackets)]
    if start is not None:
        anchors = [(a, verb) for a, verb in anchors if a >= start]
    if anchored:
        head_at = start if start is not None else sentence[0].start
        head = next((c for c in every if c.start >= head_at), None)
        if head is not None and head in cands and (head.plain or head.spelled or is_numeric_literal(head.answer)) \
                and not _anchor_between(response, head_at, head.start, anchors):
            # the answer starts with a value: a later verb restates it only as a pivot ("81-27, which is 54"), else it
            # belongs to a remark ("18 dollars: 9 eggs at $2", "$18 which she makes from 9 eggs")
            anchors = [(a, verb) for a, verb in anchors if a <= head.start or _PIVOT.search(response, max(0, a - len(verb) - 14), a)]
        anchors = [(head_at, ""), *anchors]
    for a, verb in reversed(anchors):
        after = [c for c in cands if c.start >= a]
        if after:
            group = _joined(response, after)
            later = [c for c in after if c.start >= group.end]
            if any(_AND_ANOTHER.match(response, group.end, c.start) for c in later):
                return AMBIGUOUS  # "is 20 cm long and 5 cm wide": two values stated
            members = [c for c in after if group.start <= c.start < group.end]
            if len(members) >= 2 and question is not None and all(question.mentions(c.answer) for c in members):
                return RESTATES  # "The numbers are 22 and 81.", "8 and 8": the question's operands listed
            rule = f"the value after {' '.join(verb.split())!r}" if verb else "the value at the start of the answer"
            offered = _alternatives(response, group, cands, sentence)
            if offered:
                return offered
            return group if group.rule else _with_rule(group, rule)
    if question is not None:  # no verb: of the values mentioned, the question's own are not the answer
        cands = [c for c in cands if c.result or not question.writes_beside(c.answer, _words_beside(response, c))]
        if not cands:
            return RESTATES  # "So, 2 boxes": the question's "2 boxes" again
        new = [c for c in cands if c.result or not question.mentions(c.answer)]
        if anchors and not new and not any(_ANSWER_NOUN.match(response, a) for a, _ in anchors):
            return RESTATES  # "24 is a special number ...": the question's number as a subject, nothing stated
        if not new and len(cands) >= 2:
            return RESTATES  # "We add 22 and 81.": the operands, nothing stated
        cands = new or cands  # ... unless nothing else is mentioned ("he recycles it in 2 days")
    if len(cands) == 1:
        c = cands[0]
        return Found(c.answer, c.start, c.end, spelled=c.spelled, rule="the only value mentioned")
    group = _joined(response, cands)
    if group.end == cands[-1].end:  # "$x = 5$ or $x = -5$": all values joined into one answer
        return group
    return AMBIGUOUS


_OR_BETWEEN = re.compile(
    r"(?i)(?<!whether\s)(?<!more\s)\bor\b(?!\s+(?:more|less|fewer|so|not|greater|higher|lower|above|below|over|under|longer|shorter)\b)"
    r"|\bbut\b[^.;]{0,40}?\b(?:might|may|could|possibly|perhaps|maybe|probably)\b|\b(?:unless|otherwise|if\s+not)\b"
)
"""Between two values of one clause: an alternative ("she makes 18 or she makes 32", "18, but it
might be 20", "5, unless it is 14"), not a bound ("12 or more") nor an idiom ("whether or not")."""


def _alternatives(response: str, group: Found, cands: list[_Candidate], sentence: list[_Segment]) -> Found | None:
    """The values a clause offers as alternatives to ``group`` beyond those joined to it ("Either
    she makes 18 or she makes 32.", "12 (though 15 is also possible)"), or None."""
    values = [group.answer] if not group.parts else list(group.parts)
    lo_s = sentence[0].start
    offered = [(lo_s + a, lo_s + b) for a, b in commit.alternatives(response[lo_s: sentence[-1].end])]
    spans = []
    for c in cands:
        if group.start <= c.start < group.end:
            continue
        lo, hi = (c.end, group.start) if c.end <= group.start else (group.end, c.start)
        alternative = _OR_BETWEEN.search(response, lo, hi) or any(a <= c.start < b for a, b in offered)
        if alternative and not commit.same_values([group.answer, c.answer]) and c.answer not in values:
            values.append(c.answer)
            spans.append(c)
    if not spans:
        return None
    start = min([group.start, *(c.start for c in spans)])
    end = max([group.end, *(c.end for c in spans)])
    return Found(", ".join(values), start, end, parts=tuple(values), rule="values offered as alternatives in one clause")


_PIVOT = re.compile(r"(?i)(?:\b(?:which|that|this|i\.e\.|or)\s*,?\s*(?:is|are|was|equals?|gives?)|=|\bequals?)\s*$")
"""A verb that gives the value of what precedes it ("which is 54", "that is 54", "= 54")."""


def _anchor_between(response: str, lo: int, hi: int, anchors: list[tuple[int, str]]) -> bool:
    return any(lo < a <= hi for a, _ in anchors)


def _words_beside(response: str, cand: _Candidate) -> list[str]:
    """The words just before and after a candidate ("buys 2 boxes" → buys, boxes)."""
    before = re.search(r"([A-Za-z]+)[^A-Za-z\d]{0,3}$", response[max(0, cand.start - 30): cand.start])
    after = re.match(r"[^A-Za-z\d]{0,3}([A-Za-z]+)", response[cand.end: cand.end + 30])
    return [m.group(1) for m in (before, after) if m]


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


_SAME = "several mentions of one value"


def _joined(response: str, after: list[_Candidate]) -> Found:
    """The first candidate and those joined to it (`envs.math.commit.joined_by`: "and", "or",
    commas, a range, a slash between amounts). Several different values keep their ``parts``."""
    group = [after[0]]
    kinds = []
    for c in after[1:]:
        kind = commit.joined_by(response[group[-1].end: c.start].replace("$", " "))
        if kind is None:
            break
        group.append(c)
        kinds.append(kind)
    first = group[0]
    parts = [c.answer for c in group]
    if len(group) == 1:
        return Found(first.answer, first.start, first.end, spelled=first.spelled)
    if commit.same_values([_fraction_text(p) for p in parts]):  # "36/3, or 12": one value, written out last
        plain = [c for c in group if re.fullmatch(r"-?[\d,]+(?:\.\d+)?", c.answer)] or group
        return Found(plain[-1].answer, first.start, group[-1].end, spelled=plain[-1].spelled, rule=_SAME)
    if _RANGE_BEFORE.search(response, max(0, first.start - 30), first.start):
        kinds.append("range")
    kind = next((k for k in ("or", "range", "slash") if k in kinds), "list")
    rule = {"or": "values offered as alternatives", "range": "a range of values", "slash": "values separated by a slash",
            "list": "a list of values"}[kind]
    return Found(", ".join(parts), first.start, group[-1].end, parts=tuple(parts), rule=rule)


def _fraction_text(answer: str) -> str:
    """``36/3`` → ``12`` (a plain fraction's value, for comparing mentions); other text as is."""
    m = re.fullmatch(r"\s*(-?\d+)\s*/\s*(\d+)\s*", answer)
    if m and int(m.group(2)):
        value = Fraction(int(m.group(1)), int(m.group(2)))
        return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    return answer


def _sentence_text(response: str, sentence: list[_Segment]) -> str:
    return response[sentence[0].start: sentence[-1].end]


def last_statement(response: str, question: Question | None = None) -> Found | None:
    """The final answer stated in prose (see module docstring), or None. Sentences that are
    questions, checks or set-ups, copied from the question, or that only restate its operands are
    passed over; ``Found.rule`` says which sentence decided and what was passed over."""
    base = max(0, len(response) - TAIL_CHARS)
    if base:
        para = response.find("\n\n", base)
        base = para + 2 if 0 <= para < len(response) - 1 else base
    sentences = _sentences(response, _segments(response[base:], base))
    if sentences and (_unfinished(response, sentences[-1], question) or _repeated(response[base:], _sentence_text(response, sentences[-1]), LOOP_MIN_CHARS)):
        return None  # "... which is 10 cents. Next, we calculate" (cut off before its conclusion), or stuck in a loop
    passed: list[str] = []
    for sentence in reversed(sentences[-MAX_SENTENCES:]):
        if any(s.kind == "question" for s in sentence):
            continue
        first = response[sentence[0].start: sentence[0].end] if sentence[0].kind == "text" else ""
        if _SKIP_START.match(first):
            continue
        if question is not None and commit.copied(_sentence_text(response, sentence), question):
            passed.append(COPIED.rule)
            continue
        found = statement_answer(response, sentence, question)
        if (found is None or found is RESTATES) and _GIVES_UP.search(_sentence_text(response, sentence)):
            return None  # "The answer to 75-53 is unknown to me.": the closing statement gives up
        if found is RESTATES:
            passed.append(RESTATES.rule)
            continue
        if found is AMBIGUOUS:
            return None  # the closing statement is unclear: an earlier value is not the answer
        if found is not None:
            text = _sentence_text(response, sentence)
            if _repeated(response[base:], text):
                return None  # a repetition loop ("1 candle is 12 dollars" again and again): no conclusion
            later = f"; later sentences passed over: {', '.join(passed)}" if passed else ""
            found = _with_rule(found, f"last sentence stating a value: {found.rule}{later}")
            if _ALTERNATIVE_SENTENCE.search(text) and not found.parts:
                return _with_earlier(response, sentences, sentence, found, question)
            return found
    return None


_ALTERNATIVE_SENTENCE = re.compile(r"(?i)^\W*(?:or|alternatively|maybe|perhaps|possibly)\b|\b(?:could|might|may|can)\s+also\s+be\b|\bor\s+(?:maybe|perhaps|possibly)\b"
                                   r"|^\W*(?:however|but|though|although|then\s+again|on\s+the\s+other\s+hand)\b[^.!?\n]{0,40}?\b(?:could|might|may|possibly|perhaps|maybe)\b")
"""A closing sentence that offers an alternative ("Or maybe 15.", "It could also be 15.")."""


def _with_earlier(response: str, sentences: list[list[_Segment]], sentence: list[_Segment], found: Found, question: Question | None) -> Found:
    """``found`` offered as an alternative to the value the sentence before it states: a hedge
    when the two differ ("It could be 12. It could also be 15.")."""
    k = next(i for i, s in enumerate(sentences) if s is sentence)
    for earlier in reversed(sentences[max(0, k - 3): k]):
        prev = statement_answer(response, earlier, question)
        if prev is None or isinstance(prev, _Sentinel):
            continue
        if prev.parts or commit.same_values([prev.answer, found.answer]):
            return found
        parts = (prev.answer, found.answer)
        return Found(", ".join(parts), prev.start, found.end, parts=parts, rule=f"{found.rule}; offered as an alternative to {prev.answer}")
    return found


_ANNOUNCES = re.compile(
    r"(?i)^\W*(?:\d{1,3}[.)]\s*|step\s+\d+\s*:?\s*)?(?:(?:next|then|now|after\s+that|first(?:ly)?|second(?:ly)?|third(?:ly)?|finally|lastly)\s*,?\s*)?"
    r"(?:(?:we|i|let's|let\s+us)(?:'ll|\s+(?:need|have|can|will|must|should|are\s+going|am\s+going|calculate|compute|find|determine|add|subtract|multiply|"
    r"divide|solve|start|begin|use|set|look|break|round))|to\s+(?:find|calculate|compute|determine|solve|get|figure))\b"
)
"""A sentence that announces work still to do ("Next, we calculate", "To find the total, we")."""
LOOP_REPEATS = 3
"""A closing sentence written this many times is a repetition loop, not a conclusion."""


LOOP_MIN_CHARS = 20
"""A final sentence this long, repeated `LOOP_REPEATS` times, is a loop the response is stuck in."""


def _unfinished(response: str, last: list[_Segment], question: Question | None) -> bool:
    """Whether the response stops in a sentence that announces work still to do ("Next, we
    calculate", "We can do this by adding 10 to 11 to") and states no value: the conclusion never
    came, so an earlier value is an intermediate one."""
    if not _ANNOUNCES.match(_sentence_text(response, last)) or any(s.kind == "math" for s in last):
        return False
    found = statement_answer(response, last, question)
    return found is None or isinstance(found, _Sentinel)


def _repeated(tail: str, sentence: str, min_chars: int = 12) -> bool:
    key = re.sub(r"^\W*(?:\d{1,3}[.)])?\W*", "", sentence).strip(" .,;:")
    return len(key) >= min_chars and tail.count(key) >= LOOP_REPEATS

def answer_value(text: str, question: Question | None = None) -> Found | None:
    """The value an answer span commits to (the text after "Answer:" or "the answer is", one
    sentence): the value at its start or after its last verb of statement, remarks, denials and
    operands set aside ("306 (I multiplied 34 by 9)" → 306, "17, not -17" → 17, "81-27, which is
    54" → 54, "eight miles per hour" → 8), the values offered when it offers several ("$12 or
    $15"), `COPIED` for a sentence copied from the question, or None when it states no value
    unambiguously."""
    segments = _segments(text, 0)
    sentence = [seg for part in _sentences(text, segments) for seg in part if seg.kind != "question"]
    if not sentence:
        return None
    if question is not None and commit.copied(text, question):
        return COPIED
    found = statement_answer(text, sentence, question, anchored=True)
    return None if isinstance(found, _Sentinel) else found


def sentence_value(text: str, question: Question | None = None) -> Found | None:
    """The value stated by one sentence, or None (kept for callers of earlier versions; the
    marker reading now uses `answer_value`)."""
    segments = _segments(text, 0)
    sentences = _sentences(text, segments)
    if not sentences:
        return None
    found = statement_answer(text, sentences[0], question)
    return None if isinstance(found, _Sentinel) else found
