"""The ``code`` environment: run a completion's code against hidden tests in a sandbox."""

from __future__ import annotations

from typing import Any, Sequence

import sandboxes
from envs.base import Environment
from envs.code.extract import extract_code
from envs.code.grade import DEFAULT_LIMITS, RewardMode, grade_many
from envs.code.programs import split_test_program
from envs.code.testcases import FunctionTest, TestSuite
from envs.types import Problem, Verdict


class CodeEnv(Environment):
    """Python code judged by tests run in a sandbox; verdicts are decided outside it.

    ``problem.reference`` is a `TestSuite` dict (function-call, stdin/stdout, or test-program
    tests run by an isolated tester). The code is the completion's last fenced block, or the whole
    completion. Per-test results are the process reward (``verdict.steps``, ``info["fraction"]``).

    Args:
        backend: Sandbox backend name (``"auto"``: the best available; see `sandboxes`).
        reward: ``"binary"`` (1.0 only if every test passes) or ``"fraction"``.
        wall_s / memory_mb: Per-job limits.
        backend_options: Extra options for the backend (e.g. ``{"workers": 4}``).
    """

    def __init__(self, backend: str = "auto", reward: RewardMode = "binary", wall_s: float = DEFAULT_LIMITS.wall_s,
                 memory_mb: int = DEFAULT_LIMITS.memory_mb, backend_options: dict[str, Any] | None = None):
        if reward not in ("binary", "fraction"):
            raise ValueError(f"code env: reward must be 'binary' or 'fraction', got {reward!r}")
        self.backend_name = backend
        self.reward: RewardMode = reward
        self.limits = DEFAULT_LIMITS.replace(wall_s=wall_s, cpu_s=wall_s, memory_mb=memory_mb)
        self.backend_options = dict(backend_options or {})
        self._backend: tuple[int, sandboxes.Backend] | None = None

    # environments are pickled into worker processes: the backend (pipes, workers) is not
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_backend": None}

    @property
    def backend(self) -> sandboxes.Backend:
        import os

        if self._backend is None or self._backend[0] != os.getpid():
            if self.backend_name == "auto" and not self.backend_options:
                self._backend = (os.getpid(), sandboxes.default_backend())
            else:
                self._backend = (os.getpid(), sandboxes.make_backend(self.backend_name, **self.backend_options))
        return self._backend[1]

    def answer_instruction(self, problem: Problem) -> str:
        return "Write the complete solution as one Python code block (```python ... ```)."

    def verify(self, problem: Problem, completion: str) -> Verdict:
        return self.verify_many([problem], [completion])[0]

    def verify_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Verify a batch with all of its sandbox jobs in flight together."""
        if len(problems) != len(completions):
            raise ValueError(f"verify_many: {len(problems)} problems but {len(completions)} completions")
        verdicts: list[Verdict | None] = [None] * len(problems)
        todo = []
        for i, (p, c) in enumerate(zip(problems, completions)):
            found = extract_code(c)
            if found is None:
                verdicts[i] = Verdict.no_answer(reason="no code in the completion")
                continue
            try:
                suite = TestSuite.from_dict(p.reference)
            except (ValueError, KeyError, TypeError) as e:
                verdicts[i] = Verdict.error(f"problem {p.id}: malformed reference: {e}")
                continue
            todo.append((i, found, suite))
        if todo:
            graded = grade_many([f.code for _, f, _ in todo], [s for _, _, s in todo], backend=self.backend,
                                limits=self.limits, reward=self.reward, spans=[(f.start, f.end) for _, f, _ in todo])
            for (i, found, _), v in zip(todo, graded):
                verdicts[i] = Verdict(v.reward, v.passed, v.status, v.steps, found.code[:2000], v.info) if v.status.value == "ok" else v
        return [v for v in verdicts if v is not None]

    # -- self-check hooks ---------------------------------------------------------------------

    def gold_completion(self, problem: Problem) -> str | None:
        return problem.metadata.get("solution")

    def wrong_completions(self, problem: Problem) -> list[str]:
        suite = TestSuite.from_dict(problem.reference)
        if suite.kind == "stdio":
            return ["print('no idea')"]
        name = suite.entry_point
        return [
            f"def {name}(*args, **kwargs):\n    return None\n",
            f"def {name}(*args, **kwargs):\n    raise SystemExit(0)\n",
            "import sys\nsys.exit(0)\n",
        ]

    def examples(self) -> list[Problem]:
        add = TestSuite("function", (FunctionTest("1, 2", 3), FunctionTest("-5, 5", 0), FunctionTest(f"{10**20}, 1", 10**20 + 1)), entry_point="add")
        rev = TestSuite("function", (FunctionTest("'abc'", "cba"), FunctionTest("''", "")), entry_point="rev")
        mean = TestSuite("function", (FunctionTest("[1.0, 2.0]", 1.5), FunctionTest("[0.1, 0.2]", 0.15)), entry_point="mean")
        setup, tests = split_test_program("def check(candidate):\n    import random\n    for _ in range(20):\n"
                                          "        xs = [random.randint(-9, 9) for _ in range(random.randint(0, 6))]\n"
                                          "        assert candidate(xs) == sorted(xs)\n")
        sort = TestSuite("program", tests, entry_point="sort_list", tester_setup=setup)
        return [
            Problem("ex/add", "Write add(a, b).", add.to_dict(), {"solution": "def add(a, b):\n    return a + b\n"}),
            Problem("ex/rev", "Write rev(s) reversing a string.", rev.to_dict(), {"solution": "```python\ndef rev(s):\n    return s[::-1]\n```"}),
            Problem("ex/mean", "Write mean(xs).", mean.to_dict(), {"solution": "def mean(xs):\n    return sum(xs) / len(xs)\n"}),
            Problem("ex/sort", "Write sort_list(xs) returning xs in ascending order.", sort.to_dict(),
                    {"solution": "def sort_list(xs):\n    return sorted(xs)\n"}),
        ]
