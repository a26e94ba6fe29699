"""Static math benchmarks verified by the ``math-v1`` environment: GSM8K, MATH (Hendrycks),
MATH-500, AIME 2024, AIME 2025 and AMC 2023.

GSM8K, AIME and AMC answers are numbers: a completion must state the number itself (``544``, not
``68*8``; `envs.math.forms`). MATH and MATH-500 accept any expression of the gold's value
(``env_kwargs: {numeric_literal: false}``), as their answers are often expressions. Every task's
verifier reads the question and never credits a restatement of it.

Each split loads from a local file under ``$RLVR_DATA_DIR`` when it exists (tests and offline
machines; see ``shared/data/SOURCES.md``) and otherwise from its Hugging Face dataset id. Official
splits are kept. MATH-500 is a subset of MATH test: `Task.data_sets` records it, and
`tasks.assert_disjoint` refuses to train on MATH test while MATH-500 is held out. The split
``test_rest`` of MATH is the 4,500 test problems outside MATH-500 (PRM800K's practice), safe to
train on with MATH-500 held out.

This module imports nothing heavy (listing tasks reads the classes).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from envs.types import Problem
from tasks.dataset import DatasetTask, DataSource, load_rows

PROMPT = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
"""The prompt template shared by the math tasks (the checker also reads "Answer:" lines)."""


def _question(row: dict[str, Any]) -> str:
    for key in ("problem", "question", "Problem", "Question"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise KeyError("no 'problem' or 'question' field")


def _answer_text(value: Any) -> str:
    """A gold answer as text: ``27.0`` (AMC floats) → ``"27"``; empty answers are malformed rows."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"unusable answer {value!r}")
    if isinstance(value, float):
        text = str(int(value)) if value.is_integer() else repr(value)
    else:
        text = str(value).strip()
    if not text:
        raise ValueError("empty answer")
    return text


def last_boxed(solution: str) -> str | None:
    """The content of the last ``\\boxed{}``/``\\fbox{}`` of a worked solution (brace-matched)."""
    from envs.math.extract import boxed_answers

    boxes = boxed_answers(solution)
    return boxes[-1].answer if boxes else None


class MathDatasetTask(DatasetTask):
    """Shared row handling: question from ``problem``/``question``, answer from ``answer`` (or the
    last box of ``solution``), the worked solution kept for supervised warm-up."""

    env_id = "math-v1"
    heldout_splits = ("test",)
    answer_field = "answer"
    max_new_tokens = 1024  # competition solutions: chain of thought, then the box

    def format_question(self, row: dict[str, Any]) -> str:
        return PROMPT.format(question=_question(row).strip())

    def reference(self, row: dict[str, Any]) -> str:
        if row.get(self.answer_field) not in (None, ""):
            return _answer_text(row[self.answer_field])
        boxed = last_boxed(str(row.get("solution") or ""))
        if boxed is None:
            raise KeyError(f"no {self.answer_field!r} field and no \\boxed{{}} in the solution")
        return boxed

    def usable_solution(self, solution: str) -> bool:
        """Whether a dataset solution states its answer the way completions must (a box).

        AoPS transcriptions (AIME) often end with ``\\textbf{(113)}`` or no marked answer; they
        are kept as ``reference_solution`` but not offered as gold completions."""
        return last_boxed(solution) is not None

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        meta = {k: row[k] for k in ("level", "type", "subject", "unique_id", "url", "year") if row.get(k) not in (None, "")}
        solution = row.get("solution")
        if isinstance(solution, str) and solution.strip():
            meta["reference_solution"] = solution
            if self.usable_solution(solution):
                meta["solution"] = solution  # a worked completion the checker can read
        pid = str(row.get("unique_id") or row.get("id") or index)
        return Problem(
            id=pid if "/" in pid else f"{split}/{pid}",  # MATH ids ("test/algebra/1.json") are shared by MATH-500
            prompt=self.format_question(row),
            reference=self.reference(row),
            metadata=meta,
        )

    def canonical_question(self, problem: Problem) -> str:
        # compare the question itself, not the shared instruction around it
        text = problem.prompt if isinstance(problem.prompt, str) else " ".join(m["content"] for m in problem.prompt)
        return re.sub(r"\s+", " ", text.split("\n\nPlease reason step by step")[0]).strip().lower()


class GSM8K(MathDatasetTask):
    """GSM8K grade-school word problems (7,473 train / 1,319 test); the answer follows ``####``.

    Split ``validation``: 500 of the train problems (`DatasetTask.validation_from_train`), so train
    holds the other 6,973."""

    validation_from_train = 500
    heldout_splits = ("test", "validation")
    max_new_tokens = 512
    published_sizes = {"train": 6973, "validation": 500, "test": 1319}
    sources = {
        "train": DataSource(local="gsm8k/train.jsonl", hf_id="openai/gsm8k", hf_config="main", hf_split="train"),
        "test": DataSource(local="gsm8k/test.jsonl", hf_id="openai/gsm8k", hf_config="main", hf_split="test"),
    }

    def reference(self, row: dict[str, Any]) -> str:
        answer = row["answer"]
        if not isinstance(answer, str) or "####" not in answer:
            raise ValueError("answer has no '#### <number>' line")
        return _answer_text(answer.rsplit("####", 1)[1].strip().replace(",", ""))

    def usable_solution(self, solution: str) -> bool:
        return "####" in solution

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        problem = super().row_to_problem({**row, "solution": row.get("answer")}, split, index)
        return Problem(f"{split}/{index}", problem.prompt, problem.reference, problem.metadata)


class HendrycksMath(MathDatasetTask):
    """MATH (Hendrycks et al.): 7,500 train / 5,000 test competition problems in seven subjects.

    Split ``test_rest``: the test problems outside MATH-500, for training with MATH-500 held out.
    Train leaves out rows without an answer (reported as malformed) and the one problem whose text
    also appears in test. Split ``validation``: 500 of those train problems
    (`DatasetTask.validation_from_train`); train holds the rest.
    """

    validation_from_train = 500

    env_kwargs = {"numeric_literal": False}  # an expression of the value is an answer here (2^{10} for 1024)
    published_sizes = {"train": 6997, "validation": 500, "test": 5000, "test_rest": 4500}
    sources = {
        "train": DataSource(local="math/train.jsonl", hf_id="DigitalLearningGmbH/MATH-lighteval", hf_config="default", hf_split="train"),
        "test": DataSource(local="math/test.jsonl", hf_id="DigitalLearningGmbH/MATH-lighteval", hf_config="default", hf_split="test"),
        "test_rest": DataSource(local="math/test.jsonl", hf_id="DigitalLearningGmbH/MATH-lighteval", hf_config="default", hf_split="test"),
    }
    heldout_splits = ("test", "validation")

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        if split in ("train", "validation"):
            return frozenset({f"hendrycks-math/{split}"})
        if split == "test_rest":
            return frozenset({"hendrycks-math/test-rest"})
        return frozenset({"hendrycks-math/test-math500", "hendrycks-math/test-rest"})

    @cached_property
    def _math500_questions(self) -> frozenset[str]:
        rows, _ = load_rows(Math500.sources["test"])
        return frozenset(re.sub(r"\s+", " ", _question(r)).strip() for r in rows)

    def usable_train(self, problems: list[Problem]) -> list[Problem]:
        # The release has a train problem whose text is also a test problem; training on it would
        # leak into every MATH/MATH-500 evaluation, so train drops it (test is untouched).
        test = {self.canonical_question(p) for p in self._split("test")}
        return [p for p in problems if self.canonical_question(p) not in test]

    def _split(self, split: str) -> list[Problem]:
        if split != "test_rest" or split in self._loaded:
            return super()._split(split)
        held = self._math500_questions
        # MATH-500 problems are identified by their text (ids differ between hub copies)
        self._loaded[split] = [p for p in super()._split(split) if _raw_question(p) not in held]
        return self._loaded[split]


def _raw_question(problem: Problem) -> str:
    text = problem.prompt if isinstance(problem.prompt, str) else " ".join(m["content"] for m in problem.prompt)
    return re.sub(r"\s+", " ", text.split("\n\nPlease reason step by step")[0]).strip()


class Math500(MathDatasetTask):
    """MATH-500 (Lightman et al., PRM800K): 500 MATH test problems, a standard held-out set."""

    env_kwargs = {"numeric_literal": False}  # as MATH: an expression of the value is an answer
    published_sizes = {"test": 500}
    sources = {"test": DataSource(local="math500/test.jsonl", hf_id="HuggingFaceH4/MATH-500", hf_split="test")}

    def data_sets(self, split: str) -> frozenset[str]:
        self.check_split(split)
        return frozenset({"hendrycks-math/test-math500"})


class AIME24(MathDatasetTask):
    """AIME 2024 I and II: 30 problems, integer answers 0-999 (held out)."""

    max_new_tokens = 2048

    def usable_solution(self, solution: str) -> bool:
        return False  # AoPS write-ups mark answers inconsistently; gold completions use the answer

    published_sizes = {"test": 30}
    sources = {"test": DataSource(local="aime/aime24.jsonl", hf_id="HuggingFaceH4/aime_2024", hf_split="train")}


class AIME25(MathDatasetTask):
    """AIME 2025 I and II: 30 problems, integer answers 0-999 (held out)."""

    max_new_tokens = 2048

    published_sizes = {"test": 30}
    sources = {"test": DataSource(local="aime/aime25.jsonl", hf_id="math-ai/aime25", hf_split="test")}


class AMC23(MathDatasetTask):
    """AMC 12 2023 (A and B): 40 problems with numeric answers (held out)."""

    max_new_tokens = 2048

    published_sizes = {"test": 40}
    sources = {"test": DataSource(local="amc/amc23.jsonl", hf_id="math-ai/amc23", hf_split="test")}
