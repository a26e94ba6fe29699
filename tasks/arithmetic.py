"""Procedural multi-digit arithmetic (+, -, *) with a worked scratchpad.

The scratchpad splits the second operand into its place values, one equality per line, then
states the answer::

    Compute 347*58.
    347*8=2776
    347*50=17350
    2776+17350=20126
    Answer: 20126

Every line is an equality a step checker can verify, and the format is short enough for the
embedded CPU model to learn.
"""

from __future__ import annotations

import random
from typing import Any

from envs.types import Problem
from tasks.procedural import ProceduralTask

OPS = "+-*"


def place_values(n: int) -> list[int]:
    """Non-zero place values of ``n``, least significant first (``305 -> [5, 300]``)."""
    parts, scale = [], 1
    while n:
        n, digit = divmod(n, 10)
        if digit:
            parts.append(digit * scale)
        scale *= 10
    return parts or [0]


def worked_solution(a: int, op: str, b: int) -> tuple[list[str], int]:
    """The scratchpad lines and the result of ``a op b``."""
    lines: list[str] = []
    if op in "+-":
        acc = a
        for part in place_values(b):
            nxt = acc + part if op == "+" else acc - part
            lines.append(f"{acc}{op}{part}={nxt}")
            acc = nxt
        return lines, acc
    if op != "*":
        raise ValueError(f"unknown operator {op!r}")
    products = []
    for part in place_values(b):
        products.append(a * part)
        lines.append(f"{a}*{part}={a * part}")
    acc = products[0]
    for p in products[1:]:
        lines.append(f"{acc}+{p}={acc + p}")
        acc += p
    return lines, acc


def format_prompt(a: int, op: str, b: int) -> str:
    return f"Compute {a}{op}{b}.\n"


class ArithmeticTask(ProceduralTask):
    """Multi-digit +, -, * with a worked scratchpad and an ``Answer:`` line.

    Config:
        ops: Operators to draw from (subset of ``"+-*"``).
        min_digits / max_digits: Digit count range of the first operand, and of the second for
            + and -. Subtraction orders its operands so results are non-negative.
        mul_max_digits: Maximum digits of the second operand of a product.
    """

    env_id = "math-v1"
    split_sizes = {"train": None, "validation": 200, "test": 500}
    heldout_splits = ("test", "validation")
    default_config: dict[str, Any] = {"ops": OPS, "min_digits": 2, "max_digits": 3, "mul_max_digits": 1}
    frozen: dict[str, str] = {}  # filled in once the default config is final

    def __init__(self, **config: Any):
        super().__init__(**config)
        c = self._config
        if not c["ops"] or set(c["ops"]) - set(OPS):
            raise ValueError(f"arithmetic: 'ops' must be a non-empty subset of {OPS!r}, got {c['ops']!r}")
        if not 1 <= c["min_digits"] <= c["max_digits"] or c["mul_max_digits"] < 1:
            raise ValueError(f"arithmetic: need 1 <= min_digits <= max_digits and mul_max_digits >= 1, got {c}")

    def _operand(self, rng: random.Random, lo_digits: int, hi_digits: int) -> int:
        digits = rng.randint(lo_digits, hi_digits)
        return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:
        c = self._config
        op = rng.choice(c["ops"])
        a = self._operand(rng, c["min_digits"], c["max_digits"])
        b = self._operand(rng, 1 if op == "*" else c["min_digits"], c["mul_max_digits"] if op == "*" else c["max_digits"])
        if op == "-" and b > a:
            a, b = b, a
        lines, result = worked_solution(a, op, b)
        solution = "\n".join(lines + [f"Answer: {result}"])
        return Problem(
            id=f"{split}/{index}",
            prompt=format_prompt(a, op, b),
            reference=str(result),
            metadata={"solution": solution, "a": a, "op": op, "b": b},
        )

    def canonical_question(self, problem: Problem) -> str:
        a, op, b = problem.metadata["a"], problem.metadata["op"], problem.metadata["b"]
        if op in "+*":  # commutative: 3+5 and 5+3 are the same question
            a, b = sorted((a, b))
        return f"{a}{op}{b}"
