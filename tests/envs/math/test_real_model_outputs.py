"""A labelled set of what a real model writes, run in both extraction modes.

``data/real_model_outputs.jsonl`` holds (question, gold, response) triples: greedy outputs of
SmolLM2-135M-Instruct (``smollm2-135m-instruct``, rlvr's own engine) on arithmetic-v1, gsm8k-v1 and
math500-v1, and variants of the forms such models write built on those outputs (a closing line in
one class: hedges, remarks, an expression followed by its value, numbers in words, currency, a
result followed by its operands, sentences copied from the question, echoes). Each row is labelled
by reading it:

- ``correct``: the response commits to the gold as its one final answer (a response that stops
  mid-sentence commits only to an answer it marked before it stopped, `envs.math.cut`: the two
  rambling rows cut at "including algebra," and "which is" were relabelled when that rule came);
- ``marked``: that answer is explicit (a box, an answer marker, a bare answer line), so strict
  extraction can see it.

Strict extraction must pass exactly the rows that are correct and marked, lenient extraction
exactly the correct ones: no false positive and no false negative in either mode. Rows are added
to the set, never relabelled to fit the checker; ``scripts/bench_math_checker.py --suites real``
reports agreement per mode and class.

Benchmark questions are not copied into the set: a GSM8K or MATH-500 row names its problem
(``question_ref``, the task's problem id) and is read from ``$RLVR_DATA_DIR``; a variant that
copies a question sentence writes ``{{question_sentence:N}}`` for it. Without the data those rows
are skipped (the arithmetic rows, procedural, always run).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

import tasks
from envs.math import check
from envs.math.env import question_text

SET = Path(__file__).parent / "data" / "real_model_outputs.jsonl"
CLASSES = {
    "plain": "a real output as the model wrote it",
    "hedged": "two or more candidate values (or, either/or, ranges, between, lists, a slash, an alternative after the answer)",
    "copied": "a sentence of the question copied as the closing statement (the gold is one of the question's numbers)",
    "remark": "a value followed by a parenthetical, an appositive or a unit phrase",
    "echo-value": "the question's expression followed by 'which is' / 'that is' / '=' and its value",
    "echo": "the question, an operand or an unevaluated expression restated as the answer",
    "number-words": "the value written in words",
    "currency": "a dollar amount ($ as currency, not LaTeX)",
    "operands-after": "a result followed by a sentence that only restates the operands (lenient)",
}
FIELDS = {"id": str, "task": str, "cls": str, "gold": str, "response": str, "numeric_literal": bool,
          "correct": bool, "marked": bool, "origin": str}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PLACEHOLDER = re.compile(r"\{\{question_sentence:(\d+)\}\}")


def have_data() -> bool:
    return os.path.isdir(os.path.join(os.environ.get("RLVR_DATA_DIR", ""), "gsm8k"))


@lru_cache(maxsize=None)
def _problems(task_id: str) -> dict:
    task = tasks.make(task_id)
    return {p.id: p for split in task.splits for p in task.problems(split)}


def load_set(path: Path = SET, *, with_data: bool | None = None) -> list[dict]:
    """The labelled rows with their questions filled in; rows that name a benchmark problem are
    left out when the data is unavailable (``with_data`` False; default: whether
    ``$RLVR_DATA_DIR`` has it). A malformed row raises ValueError naming its line and field."""
    with_data = have_data() if with_data is None else with_data
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        for field, kind in FIELDS.items():
            if not isinstance(row.get(field), kind):
                raise ValueError(f"{path.name}:{lineno}: field {field!r} must be {kind.__name__}, got {row.get(field)!r}")
        if row["cls"] not in CLASSES:
            raise ValueError(f"{path.name}:{lineno}: unknown class {row['cls']!r}; known: {', '.join(CLASSES)}")
        if isinstance(row.get("question_ref"), str):
            if not with_data:
                continue
            problem = _problems(row["task"]).get(row["question_ref"])
            if problem is None:
                raise ValueError(f"{path.name}:{lineno}: question_ref {row['question_ref']!r} is not a problem of {row['task']}")
            row["question"] = question_text(problem)
        elif not isinstance(row.get("question"), str):
            raise ValueError(f"{path.name}:{lineno}: a row needs 'question' (text) or 'question_ref' (a problem id of its task)")
        sentences = [x.strip() for x in _SENTENCE.split(row["question"]) if x.strip()]
        row["response"] = _PLACEHOLDER.sub(lambda m: sentences[int(m.group(1))], row["response"])
        rows.append(row)
    return rows


def expected(row: dict, mode: str) -> bool:
    """What the checker must say: lenient passes the correct rows, strict the correct and marked ones."""
    return row["correct"] and (row["marked"] or mode == "lenient")


ROWS = load_set()


@pytest.mark.skipif(not have_data(), reason="needs $RLVR_DATA_DIR with the benchmark data (GSM8K and MATH-500 rows)")
def test_the_set_is_well_formed_and_covers_every_class_with_passes_and_fails():
    assert len({r["id"] for r in ROWS}) == len(ROWS), "row ids must be unique"
    classes = Counter(r["cls"] for r in ROWS)
    assert set(classes) == set(CLASSES), f"classes without rows: {set(CLASSES) - set(classes)}"
    assert all(n >= 10 for n in classes.values()), classes
    for mode in ("strict", "lenient"):
        labels = Counter(expected(r, mode) for r in ROWS)
        assert labels[True] >= 50 and labels[False] >= 50, (mode, labels)
    real = [r for r in ROWS if r["cls"] == "plain"]
    assert {r["task"] for r in real} == {"arithmetic-v1", "gsm8k-v1", "math500-v1"}
    assert any(r["correct"] for r in real) and any(not r["correct"] for r in real)


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_the_checker_agrees_with_every_label(mode):
    wrong = []
    for r in ROWS:
        v = check(r["response"], r["gold"], extraction=mode, question=r["question"], numeric_literal=r["numeric_literal"], timeout_s=5)
        if v.passed != expected(r, mode):
            kind = "false positive" if v.passed else "false negative"
            wrong.append(f"{kind} {r['id']} [{r['cls']}] gold {r['gold']!r} extracted {v.extracted!r} ({v.info.get('rule')}): ...{r['response'][-120:]!r}")
    assert not wrong, f"{len(wrong)} of {len(ROWS)} rows disagree in {mode} mode:\n" + "\n".join(wrong)


def test_hedged_rows_fail_with_reason_hedged_whenever_an_answer_is_read():
    for r in (r for r in ROWS if r["cls"] == "hedged"):
        for mode in ("strict", "lenient"):
            v = check(r["response"], r["gold"], extraction=mode, question=r["question"], numeric_literal=r["numeric_literal"])
            assert not v.passed
            if v.status.value == "ok":  # strict finds no answer in unmarked prose: no_answer, not a wrong one
                assert v.info.get("reason") == "hedged", (r["id"], mode, v.extracted, v.info)
