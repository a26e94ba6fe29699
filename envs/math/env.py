"""`check`, the public math checker, and `MathEnv`, the ``math`` environment built on it.

    from envs.math import check
    check("... so \\boxed{\\frac{1}{2}}", "0.5").passed  # True

A check is: extract the final answer (`envs.math.extract`, strict or lenient), refuse an answer
whose form cannot be the answer (an operation left undone where a number is asked for, a
restatement of the question: `envs.math.forms`), compare it with the gold answer (plain numbers
and fractions on a pure-Python fast path; everything else parsed into trees and compared by
`envs.math.compare`), and score the worked solution's equalities (`envs.math.steps`). It never
takes longer than ``timeout_s``: the only step that can be slow, sympy, runs in a supervised
worker process that is killed when the deadline passes. It never raises either: bad arguments
and internal failures are a `Verdict` with status ``error``.
"""

from __future__ import annotations

import re
import time
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable, Sequence

from envs.base import Environment, safe_verify
from envs.math import nodes as N
from envs.math.compare import Comparer
from envs.math import commit, numwords
from envs.math.cut import cut_reason
from envs.math.extract import LEFT_OPEN_RULE, Extraction, check_mode, extract_answer, left_open, unescape
from envs.math.forms import Question, is_numeric_literal, question_expressions, same_expression
from envs.math.lexer import ParseError, normalize
from envs.math.parser import parse_answer
from envs.math.steps import step_rewards
from envs.types import CutText, Problem, Status, Verdict

DEFAULT_TIMEOUT_S = 1.0
MAX_ECHOED_EXPRESSIONS = 8
"""Expressions of one question tried as echoes by the self-checks (`MathEnv.echo_completions`)."""

_PLAIN = re.compile(r"^\s*\$?\s*([+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+|[+-]?\d+/[1-9]\d*)\s*\$?\s*\.?\s*$")


def plain_number(text: str) -> Fraction | None:
    """The value of a plain integer, decimal or ``a/b`` (the fast path), else None."""
    if len(text) > 100:
        return None
    m = _PLAIN.match(text)
    if m is None:
        return None
    s = m.group(1).replace(",", "")
    return Fraction(s)


def check(
    response: str,
    gold: Any,
    *,
    extraction: str = "strict",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    rel_tol: float | None = None,
    process_rewards: bool = True,
    symbolic: bool = True,
    numeric_literal: bool = False,
    question: str | None = None,
    truncated: bool = False,
) -> Verdict:
    """Judge a model response against a gold answer.

    Args:
        response: The model's completion.
        gold: The gold answer (LaTeX or plain text; numbers are converted with ``str``).
        extraction: ``"strict"`` (default): without an explicit answer (box, marker or a bare
            one-line answer) the verdict is ``no_answer``; so is a bare line that does not parse
            ("The sum of 47 and 38 is 85."). ``"lenient"``: the value stated by the last sentence
            that states one (see `envs.math.extract`).
        timeout_s: Hard bound on the whole check; a check that cannot finish in time returns
            status ``timeout``.
        rel_tol: Opt-in relative tolerance for constant answers (e.g. ``1e-4``); None (default)
            means exact equality only.
        process_rewards: Score the intermediate equalities of the worked solution (``steps``).
        symbolic: Allow the sympy worker for answers exact arithmetic cannot decide.
        numeric_literal: When the gold is a number, only a numeric literal passes (``544``,
            ``-3.5``, ``3/4``, ``\\frac{3}{4}``, ``1.5e3``, ``1,000``; see `envs.math.forms`): an
            operation left undone (``68*8``, ``\\frac{10}{2}``) fails with ``info["rejected"]``.
            False (default here, where `check` compares values): any expression of the gold's
            value passes (MATH: ``2^{10}`` for 1024). Rewards use `MathEnv`, whose default is True.
        question: The question's text. When given, an answer that restates one of its expressions
            (``68*8`` for "Compute 68*8.", ``\\sqrt{8}`` for "Simplify $\\sqrt{8}$") never passes,
            unless it is written exactly as the gold; lenient extraction does not take a restated
            expression or operand as the value a sentence states.
        truncated: Generation cut the response at its token budget. With lenient extraction a
            cut response (this, or one that ends mid-sentence) is credited only for an answer it
            committed to with a marker before the cut (`envs.math.cut`); with strict extraction
            a truncated response is credited only for such an answer too (a cut "Answer: 4" may
            be the start of 45); ``info["cut"]`` says why it counted as cut.

    Returns:
        A `Verdict`: reward 1.0 and ``passed`` when equal; ``extracted`` is the answer found;
        ``info`` holds the normalised forms (``pred``, ``gold``) and the evidence (``decided_by``).
        Never raises: a bad argument or an internal failure is status ``error`` with ``info["error"]``.
    """
    start = time.monotonic()
    try:
        return _check(response, gold, extraction, start, timeout_s, rel_tol, process_rewards, symbolic, numeric_literal, question, truncated)
    except Exception as e:  # a verifier must never raise to its caller: report, do not crash
        return Verdict(0.0, False, Status.ERROR, info={"error": f"{type(e).__name__}: {e}"[:500], "check_s": time.monotonic() - start})


def _check(response: Any, gold: Any, extraction: str, start: float, timeout_s: float, rel_tol: float | None,
           process_rewards: bool, symbolic: bool, numeric_literal: bool, question: str | None, truncated: bool) -> Verdict:
    deadline = start + timeout_s
    if not isinstance(response, str):
        raise TypeError(f"response must be a string, got {type(response).__name__}")
    if question is not None and not isinstance(question, str):
        raise TypeError(f"question must be a string or None, got {type(question).__name__}")
    check_mode(extraction)
    gold_text = unescape(_gold_text(gold))
    response = unescape(response)
    asked = Question.of(question)
    steps = step_rewards(response) if process_rewards else ()
    found = extract_answer(response, extraction=extraction, question=asked, truncated=truncated)
    was_cut = cut_reason(response, truncated) if extraction == "lenient" else ("truncated" if truncated else None)
    if found is None:
        why = LEFT_OPEN_RULE if left_open(response, asked) else _NO_ANSWER_CUT if was_cut else _NO_ANSWER[extraction]
        return Verdict(0.0, False, Status.NO_ANSWER, steps=steps,
                       info={"rule": why, "check_s": time.monotonic() - start, **({"cut": was_cut} if was_cut else {})})
    info: dict[str, Any] = {"method": found.method, "span": [found.start, found.end], "rule": found.rule}
    if was_cut:
        info["cut"] = was_cut

    fast_gold = plain_number(gold_text)
    answer = _answer_text(found, lambda: fast_gold is not None or _numeric_gold(gold_text), info)
    fast_pred = plain_number(answer)
    pred_tree = None
    if found.method == "bare" and fast_pred is None:
        try:  # a bare line is an answer only when it reads as one (or is the gold's very text)
            pred_tree = parse_answer(answer)
        except (ParseError, RecursionError) as e:
            if not same_expression(answer, gold_text):
                info.update(parse_error=str(e), bare_line=answer[:200], check_s=time.monotonic() - start)
                return Verdict(0.0, False, Status.NO_ANSWER, steps=steps, info=info)
    rejected = _rejected(found, answer, gold_text, fast_gold, asked, numeric_literal, response[found.end: found.end + 40])
    if rejected:
        reason, why = rejected
        info.update(rejected=why, reason=reason, check_s=time.monotonic() - start)
        return Verdict(0.0, False, Status.OK, steps=steps, extracted=answer, info=info)
    if fast_pred is not None and fast_gold is not None:
        ok = fast_pred == fast_gold
        info.update(pred=_frac_text(fast_pred), gold=_frac_text(fast_gold), decided_by=["fast-rational"], check_s=time.monotonic() - start)
        return Verdict(float(ok), ok, Status.OK, steps=steps, extracted=answer, info=info)

    try:
        gold_tree = parse_answer(gold_text)
    except (ParseError, RecursionError) as e:
        return _textual(found.answer, gold_text, steps, info, f"gold answer could not be parsed: {e}", start)
    info["gold"] = N.to_text(gold_tree)
    try:
        pred_tree = pred_tree if pred_tree is not None else parse_answer(answer)
    except (ParseError, RecursionError) as e:
        info.update(parse_error=str(e), check_s=time.monotonic() - start)
        return Verdict(0.0, False, Status.OK, steps=steps, extracted=answer, info=info)
    info["pred"] = N.to_text(pred_tree)

    comparer = Comparer(deadline=deadline, rel_tol=rel_tol, symbolic=symbolic)
    try:
        ok = comparer.answers(pred_tree, gold_tree)
    except RecursionError:  # a pathologically deep answer: undecided, never a reward
        ok, comparer.undecided = False, True
        comparer.methods.append("too-deep")
    info.update(decided_by=comparer.methods, check_s=time.monotonic() - start)
    if comparer.undecided and not ok:
        info["undecided"] = True
    if comparer.timed_out and not ok:
        return Verdict(0.0, False, Status.TIMEOUT, steps=steps, extracted=answer, info={**info, "timeout_s": timeout_s})
    return Verdict(float(ok), ok, Status.OK, steps=steps, extracted=answer, info=info)


_NO_ANSWER = {
    "strict": "no explicit answer: no \\boxed{}, no answer marker committing to a value, no bare one-line answer",
    "lenient": "no explicit answer, and no closing sentence states one value (sentences copied from the question or "
               "restating its operands are passed over; one mentioning several values states none)",
}


_NO_ANSWER_CUT = ("a cut response (at its token budget, or ending mid-sentence) answers only with a \\boxed{} or an answer marker "
                  "(\"The answer is\", \"Answer:\", \"####\") whose sentence ended before the cut; the values in its unfinished "
                  "reasoning are steps, not an answer")


def _answer_text(found: Extraction, numeric_gold: Callable[[], bool], info: dict[str, Any]) -> str:
    """The answer compared: a number written as words counts as its value only where the gold is
    a number ("zero", "eight miles per hour", ``\\boxed{\\text{twelve}}``); elsewhere its words."""
    if found.spelled is not None:
        if numeric_gold():
            info["spelled"] = found.spelled
            return found.answer
        return found.spelled
    if not found.parts and (value := numwords.value_of(found.answer)) is not None and numeric_gold():
        info["spelled"] = found.answer
        return numwords.digits(value)
    return found.answer


@lru_cache(maxsize=4096)
def _numeric_gold(gold_text: str) -> bool:
    """Whether the gold is a number (cached: a group of completions shares its gold)."""
    return is_numeric_literal(gold_text, lowest_terms=False)


def _rejected(found: Extraction, answer: str, gold_text: str, fast_gold: Fraction | None, asked: Question,
              numeric_literal: bool, after: str = "") -> tuple[str, str] | None:
    """Why an answer cannot pass whatever its value, as ``(reason, explanation)``, or None:
    ``hedged`` (several values offered for a one-value gold, or a bound instead of a value:
    `envs.math.commit`), ``not_literal`` and ``restated`` (`envs.math.forms`)."""
    offered = _offered_values(found, answer, gold_text, fast_gold)
    if offered:
        shown = " / ".join(offered)
        return "hedged", f"hedged: offers {len(offered)} candidate values ({shown[:120]}); an answer must commit to one value"
    stated_bound = commit.bound(answer, after)
    if stated_bound and (fast_gold is not None or not _multi_part(gold_text)):
        return "hedged", f"hedged: states a bound ({stated_bound!r}), not a value; an answer must commit to one value"
    if numeric_literal and (fast_gold is not None or _numeric_gold(gold_text)) and not is_numeric_literal(answer):
        return "not_literal", "not a numeric literal: a numeric answer must be the value itself, not an operation on numbers"
    if asked.restates(answer) and not same_expression(answer, gold_text):
        return "restated", "restates the question: an expression from the question is not its answer"
    return None


_LIST_HINT = re.compile(r",|;|\bor\b|\band\b|\\text\s*\{\s*(?:or|and)\s*\}")
_MULTI_PART = (N.Answers, N.Tuple, N.SetOf, N.Interval, N.Union_, N.Intersect, N.SetDiff, N.Assignments, N.Matrix)


def _offered_values(found: Extraction, answer: str, gold_text: str, fast_gold: Fraction | None) -> tuple[str, ...]:
    """The values a hedged answer offers where the gold is one value ("12 or 15", "between 10 and
    20", ``\\boxed{12, 15}``), else ``()``. Where the gold has several parts they are its answer."""
    parts = found.parts
    if len(parts) < 2 and ("," not in answer and "or" not in answer and "and" not in answer and ";" not in answer or not _LIST_HINT.search(answer)):
        return ()  # the common case, one value: no regex to run
    if fast_gold is None and _multi_part(gold_text):
        return ()
    if len(parts) >= 2:
        return () if commit.same_values(parts) or len(set(parts)) == 1 else parts
    try:
        tree = parse_answer(answer)
    except (ParseError, RecursionError):
        return ()
    if isinstance(tree, N.Answers) and len({N.to_text(item) for item in tree.items}) >= 2:
        return tuple(N.to_text(item) for item in tree.items)
    return ()


@lru_cache(maxsize=4096)
def _multi_part(gold_text: str) -> bool:
    """Whether a gold answer has several parts (a list, tuple, set, interval, ``\\pm``, several
    named values) or cannot be read; a single value, an expression or one equation has one."""
    try:
        tree = parse_answer(gold_text)
    except (ParseError, RecursionError):
        return True
    return any(isinstance(n, _MULTI_PART) or isinstance(n, N.PlusMinus) or (isinstance(n, N.Relation) and any(op != "=" for op in n.ops))
               for n in N.walk(tree))


def _gold_text(gold: Any) -> str:
    if isinstance(gold, float) and gold.is_integer():
        return str(int(gold))  # AMC golds come as 27.0
    if isinstance(gold, bool) or gold is None:
        raise TypeError(f"gold answer must be text or a number, got {gold!r}")
    return str(gold)


def _frac_text(q: Fraction) -> str:
    return str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"


def _textual(pred: str, gold: str, steps, info: dict, reason: str, start: float) -> Verdict:
    """Fallback when the gold itself cannot be parsed: equal normalised text passes; anything
    else is an ``error`` (the verifier cannot judge it, which is not the model's fault)."""
    try:
        same = normalize(pred).replace(" ", "") == normalize(gold).replace(" ", "")
    except ParseError:
        same = False
    info.update(decided_by=["text"], check_s=time.monotonic() - start)
    if same:
        return Verdict(1.0, True, Status.OK, steps=steps, extracted=pred, info=info)
    return Verdict(0.0, False, Status.ERROR, steps=steps, extracted=pred, info={**info, "error": reason})


def question_text(problem: Problem) -> str:
    """The text a problem asks: its prompt, or its chat messages' contents (not the assistant's)."""
    if isinstance(problem.prompt, str):
        return problem.prompt
    return "\n".join(m.get("content", "") for m in problem.prompt if m.get("role") != "assistant")


def warmup(timeout_s: float = 60.0) -> bool:
    """Start this process's sympy workers and wait until they are ready (True if all are).

    Call it before latency-sensitive use: a worker that is still importing sympy cannot answer
    within a 1 s budget, so a check needing it would report ``timeout``.
    """
    from envs.math.worker import get_pool

    return get_pool().warmup(timeout_s)


class MathEnv(Environment):
    """Math final answers: extraction, exact/symbolic equivalence and per-step process rewards.

    Args:
        extraction: ``"strict"`` (default; training rewards): without an explicit answer (box,
            marker, bare one-line answer) a completion has no answer. ``"lenient"`` (evaluating
            models not trained to mark answers): the value stated by the last sentence that states
            one. Set per task with ``env_kwargs: {extraction: lenient}``.
        timeout_s: Hard time bound per verification (default 1 s).
        rel_tol: Opt-in relative numeric tolerance for constant answers (default: exact).
        process_rewards: Fill ``Verdict.steps`` with checked equalities of the solution.
        numeric_literal: True (default; arithmetic, GSM8K, AIME, AMC): a numeric gold needs a
            numeric literal (``544``, not ``68*8``). False where an expression is a legitimate
            answer (MATH, MATH-500: ``env_kwargs: {numeric_literal: false}``).

    Every verification reads the problem's question (its prompt's text): an answer restating one
    of the question's expressions never passes (see `check`).
    """

    def __init__(self, extraction: str = "strict", timeout_s: float = DEFAULT_TIMEOUT_S, rel_tol: float | None = None, process_rewards: bool = True,
                 numeric_literal: bool = True):
        check_mode(extraction)
        if timeout_s <= 0:
            raise ValueError(f"math env: timeout_s must be > 0, got {timeout_s}")
        if rel_tol is not None and not 0 <= rel_tol < 1:
            raise ValueError(f"math env: rel_tol must be in [0, 1), got {rel_tol}")
        self.extraction = extraction
        self.timeout_s = timeout_s
        self.rel_tol = rel_tol
        self.process_rewards = process_rewards
        if not isinstance(numeric_literal, bool):
            raise ValueError(f"math env: numeric_literal must be true or false, got {numeric_literal!r}")
        self.numeric_literal = numeric_literal

    def __setstate__(self, state: dict) -> None:
        # Unpickled in a verifier worker process: start its sympy workers now (non-blocking) so
        # they are warm by the time a completion needs them.
        self.__dict__.update(state)
        from envs.math.worker import get_pool

        get_pool().start()

    def answer_instruction(self, problem: Problem) -> str:
        """An ``Answer:`` line (a number where one is required), unless the prompt already says how."""
        asked = question_text(problem)
        if "\\boxed" in asked or "Answer:" in asked:
            return ""
        if self.numeric_literal:
            return 'End your response with a line "Answer: <number>", the number written out in digits.'
        return 'End your response with a line "Answer: <final answer>".'

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return check(
            completion, problem.reference, extraction=self.extraction, timeout_s=self.timeout_s,
            rel_tol=self.rel_tol, process_rewards=self.process_rewards, numeric_literal=self.numeric_literal,
            question=question_text(problem), truncated=isinstance(completion, CutText),
        )

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Verify a batch in this thread (golds are parsed once and cached across the batch)."""
        if len(problems) != len(completions):
            raise ValueError(f"verify_many: {len(problems)} problems but {len(completions)} completions")
        return [safe_verify(self, p, c) for p, c in zip(problems, completions)]

    def gold_completion(self, problem: Problem) -> str:
        return problem.metadata.get("solution") or f"The answer is $\\boxed{{{problem.reference}}}$."

    def wrong_completions(self, problem: Problem) -> list[str]:
        gold = _gold_text(problem.reference)
        value = plain_number(gold)
        wrong = _frac_text(value + 1) if value is not None else f"{gold} + 1"
        return [f"Answer: {wrong}", "", "I am not sure."]

    def echo_completions(self, problem: Problem) -> list[str]:
        """The question copied, and each of its expressions that asks for an operation given as
        the answer (``98*1``, ``98*1.``, ``Answer: 98*1``, ``\\boxed{98*1}`` for "Compute
        98*1."); numbers, lone variables ("(C) $c$") and an expression written exactly as the gold
        are left out (they can be the answer)."""
        question = question_text(problem)
        gold = _gold_text(problem.reference)
        out = [question] if question.strip() else []
        asked = Question.of(question)
        restatable = [e for e in question_expressions(question) if asked.restates(e.rstrip("!.,;: "))]
        for expr in restatable[:MAX_ECHOED_EXPRESSIONS]:
            if not same_expression(expr, gold):
                out += [expr, f"{expr}.", f"Answer: {expr}", f"\\boxed{{{expr}}}"]
        return out

    def examples(self) -> list[Problem]:
        return [
            Problem("ex/0", "What is 6*7?", "42"),
            Problem("ex/1", "Half of 3?", "\\frac{3}{2}"),
            Problem("ex/2", "Name the set of primes below 4.", "\\{2,3\\}"),
            Problem("ex/3", "Solve x^2 = 2 for x > 0.", "\\sqrt{2}"),
            Problem("ex/4", "For which x is x^2 < 1?", "(-1, 1)"),
        ]
