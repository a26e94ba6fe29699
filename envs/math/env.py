"""`check`, the public math checker, and `MathEnv`, the ``math`` environment built on it.

    from envs.math import check
    check("... so \\boxed{\\frac{1}{2}}", "0.5").passed  # True

A check is: extract the final answer (`envs.math.extract`, strict or lenient), compare it with
the gold answer (plain numbers and fractions on a pure-Python fast path; everything else parsed
into trees and compared by `envs.math.compare`), and score the worked solution's equalities
(`envs.math.steps`). It never takes longer than ``timeout_s``: the only step that can be slow,
sympy, runs in a supervised worker process that is killed when the deadline passes. It never
raises either: bad arguments and internal failures are a `Verdict` with status ``error``.
"""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any, Sequence

from envs.base import Environment, safe_verify
from envs.math import nodes as N
from envs.math.compare import Comparer
from envs.math.extract import check_mode, extract_answer, unescape
from envs.math.lexer import ParseError, normalize
from envs.math.parser import parse_answer
from envs.math.steps import step_rewards
from envs.types import Problem, Status, Verdict

DEFAULT_TIMEOUT_S = 1.0

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
) -> Verdict:
    """Judge a model response against a gold answer.

    Args:
        response: The model's completion.
        gold: The gold answer (LaTeX or plain text; numbers are converted with ``str``).
        extraction: ``"strict"`` (default): without an explicit answer (box, marker or a bare
            one-line answer) the verdict is ``no_answer``. ``"lenient"``: the value stated by the
            last sentence that states one (see `envs.math.extract`).
        timeout_s: Hard bound on the whole check; a check that cannot finish in time returns
            status ``timeout``.
        rel_tol: Opt-in relative tolerance for constant answers (e.g. ``1e-4``); None (default)
            means exact equality only.
        process_rewards: Score the intermediate equalities of the worked solution (``steps``).
        symbolic: Allow the sympy worker for answers exact arithmetic cannot decide.

    Returns:
        A `Verdict`: reward 1.0 and ``passed`` when equal; ``extracted`` is the answer found;
        ``info`` holds the normalised forms (``pred``, ``gold``) and the evidence (``decided_by``).
        Never raises: a bad argument or an internal failure is status ``error`` with ``info["error"]``.
    """
    start = time.monotonic()
    try:
        return _check(response, gold, extraction, start, timeout_s, rel_tol, process_rewards, symbolic)
    except Exception as e:  # a verifier must never raise to its caller: report, do not crash
        return Verdict(0.0, False, Status.ERROR, info={"error": f"{type(e).__name__}: {e}"[:500], "check_s": time.monotonic() - start})


def _check(response: Any, gold: Any, extraction: str, start: float, timeout_s: float, rel_tol: float | None,
           process_rewards: bool, symbolic: bool) -> Verdict:
    deadline = start + timeout_s
    if not isinstance(response, str):
        raise TypeError(f"response must be a string, got {type(response).__name__}")
    check_mode(extraction)
    gold_text = unescape(_gold_text(gold))
    response = unescape(response)
    steps = step_rewards(response) if process_rewards else ()
    found = extract_answer(response, extraction=extraction)
    if found is None:
        return Verdict(0.0, False, Status.NO_ANSWER, steps=steps, info={"check_s": time.monotonic() - start})
    info: dict[str, Any] = {"method": found.method, "span": [found.start, found.end]}

    fast_pred, fast_gold = plain_number(found.answer), plain_number(gold_text)
    if fast_pred is not None and fast_gold is not None:
        ok = fast_pred == fast_gold
        info.update(pred=_frac_text(fast_pred), gold=_frac_text(fast_gold), decided_by=["fast-rational"], check_s=time.monotonic() - start)
        return Verdict(float(ok), ok, Status.OK, steps=steps, extracted=found.answer, info=info)

    try:
        gold_tree = parse_answer(gold_text)
    except (ParseError, RecursionError) as e:
        return _textual(found.answer, gold_text, steps, info, f"gold answer could not be parsed: {e}", start)
    info["gold"] = N.to_text(gold_tree)
    try:
        pred_tree = parse_answer(found.answer)
    except (ParseError, RecursionError) as e:
        info.update(parse_error=str(e), check_s=time.monotonic() - start)
        return Verdict(0.0, False, Status.OK, steps=steps, extracted=found.answer, info=info)
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
        return Verdict(0.0, False, Status.TIMEOUT, steps=steps, extracted=found.answer, info={**info, "timeout_s": timeout_s})
    return Verdict(float(ok), ok, Status.OK, steps=steps, extracted=found.answer, info=info)


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
    """

    def __init__(self, extraction: str = "strict", timeout_s: float = DEFAULT_TIMEOUT_S, rel_tol: float | None = None, process_rewards: bool = True):
        check_mode(extraction)
        if timeout_s <= 0:
            raise ValueError(f"math env: timeout_s must be > 0, got {timeout_s}")
        if rel_tol is not None and not 0 <= rel_tol < 1:
            raise ValueError(f"math env: rel_tol must be in [0, 1), got {rel_tol}")
        self.extraction = extraction
        self.timeout_s = timeout_s
        self.rel_tol = rel_tol
        self.process_rewards = process_rewards

    def __setstate__(self, state: dict) -> None:
        # Unpickled in a verifier worker process: start its sympy workers now (non-blocking) so
        # they are warm by the time a completion needs them.
        self.__dict__.update(state)
        from envs.math.worker import get_pool

        get_pool().start()

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return check(
            completion, problem.reference, extraction=self.extraction, timeout_s=self.timeout_s,
            rel_tol=self.rel_tol, process_rewards=self.process_rewards,
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

    def examples(self) -> list[Problem]:
        return [
            Problem("ex/0", "What is 6*7?", "42"),
            Problem("ex/1", "Half of 3?", "\\frac{3}{2}"),
            Problem("ex/2", "Name the set of primes below 4.", "\\{2,3\\}"),
            Problem("ex/3", "Solve x^2 = 2 for x > 0.", "\\sqrt{2}"),
            Problem("ex/4", "For which x is x^2 < 1?", "(-1, 1)"),
        ]
