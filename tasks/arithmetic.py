"""Procedural multi-digit arithmetic (+, -, *) with a worked scratchpad.

The scratchpad is the long-hand column algorithm: one line per column, right to left, each a
single-digit fact with its carry (or borrow), then the answer, whose digits are the last line's
result followed by the other lines' last digits in reverse::

    Compute 347+58.          Compute 405-98.          Compute 47*8.
    7+8=15                   15-8=7                   7*8=56
    4+5+1=10                 10-9-1=0                 4*8+5=37
    3+0+1=4                  4-0-1=3                  Answer: 376
    Answer: 405              Answer: 307

Every line is a true equality (a step checker gives process rewards), and every step is small
enough for the embedded CPU model to learn quickly, while answering without the scratchpad needs
the whole carry chain at once.

Demonstrations (the worked solutions used for supervised warm-up) can mix in bare answers
(``direct_frac``), as real demonstration data mixes shown and unshown work. A model warmed up on
such a mix sometimes answers without working and is wrong more often; outcome reward alone then
teaches it to show its work. The embedded quickstart uses this to show RL changing behaviour.
"""

from __future__ import annotations

import random
from typing import Any

from envs.types import Problem
from tasks.base import stable_hash
from tasks.procedural import ProceduralTask

OPS = "+-*"


def _digits(n: int, width: int) -> list[int]:
    """Digits of ``n``, least significant first, zero-padded to ``width``."""
    return [(n // 10**i) % 10 for i in range(width)]


def _add_lines(a: int, b: int) -> list[str]:
    lines, carry = [], 0
    width = max(len(str(a)), len(str(b)))
    for da, db in zip(_digits(a, width), _digits(b, width)):
        total = da + db + carry
        lines.append(f"{da}+{db}+{carry}={total}" if carry else f"{da}+{db}={total}")
        carry = total // 10
    return lines


def _sub_lines(a: int, b: int) -> list[str]:
    """Column subtraction for ``a >= b``: a borrowed ten shows as a leading 1 on the digit."""
    lines, borrow = [], 0
    width = len(str(a))
    for da, db in zip(_digits(a, width), _digits(b, width)):
        top = da + 10 if da - borrow < db else da
        result = top - db - borrow
        lines.append(f"{top}-{db}-{borrow}={result}" if borrow else f"{top}-{db}={result}")
        borrow = 1 if top > 9 else 0
    return lines


def _mul_lines(a: int, d: int) -> list[str]:
    """Column product of ``a`` by the single digit ``d``."""
    lines, carry = [], 0
    for da in _digits(a, len(str(a))):
        total = da * d + carry
        lines.append(f"{da}*{d}+{carry}={total}" if carry else f"{da}*{d}={total}")
        carry = total // 10
    return lines


def _assemble(lines: list[str]) -> int:
    """The answer the column lines spell: the last result, then the others' last digits in reverse."""
    results = [line.rsplit("=", 1)[1] for line in lines]
    return int(results[-1] + "".join(r[-1] for r in reversed(results[:-1])))


def worked_solution(a: int, op: str, b: int) -> tuple[list[str], int]:
    """The scratchpad lines and the result of ``a op b`` (``a >= b`` for subtraction).

    A product by a multi-digit ``b`` is worked as one column product per digit of ``b``
    (``347*58``: ``347*8``, then ``347*5`` shifted), each summed into a running total by column
    addition.
    """
    if op == "+":
        lines = _add_lines(a, b)
        return lines, _assemble(lines)
    if op == "-":
        if b > a:
            raise ValueError(f"column subtraction needs a >= b, got {a}-{b}")
        lines = _sub_lines(a, b)
        return lines, _assemble(lines)
    if op != "*":
        raise ValueError(f"unknown operator {op!r}")
    lines, total = [], 0
    for place, d in enumerate(_digits(b, len(str(b)))):
        part = _mul_lines(a, d)
        partial = _assemble(part) * 10**place
        lines += part + ([f"{a}*{d * 10**place}={partial}"] if len(str(b)) > 1 else [])
        if place:
            add = _add_lines(total, partial)
            lines += add + [f"{total}+{partial}={total + partial}"]
        total += partial
    return lines, total


def format_prompt(a: int, op: str, b: int) -> str:
    return f"Compute {a}{op}{b}.\n"


class ArithmeticTask(ProceduralTask):
    """Multi-digit +, -, * with a worked scratchpad and an ``Answer:`` line.

    Config:
        ops: Operators to draw from (subset of ``"+-*"``).
        min_digits / max_digits: Digit count range of the first operand, and of the second for
            + and -. Subtraction orders its operands so results are non-negative.
        mul_max_digits: Maximum digits of the second operand of a product.
        direct_frac: Fraction of demonstrations that give the bare answer without the scratchpad
            (chosen per problem by a hash of its id; does not change the problems themselves).
    """

    env_id = "math-v1"
    split_sizes = {"train": None, "validation": 200, "test": 500}
    heldout_splits = ("test", "validation")
    default_config: dict[str, Any] = {"ops": OPS, "min_digits": 2, "max_digits": 2, "mul_max_digits": 1, "direct_frac": 0.0}
    demo_keys = frozenset({"direct_frac"})
    frozen = {"test": "sha256:62e92be7d29cb8641999509410afae2e3bdad0ba7c9e63872f467338a5f4f6cc"}

    def __init__(self, **config: Any):
        super().__init__(**config)
        c = self._config
        if not c["ops"] or set(c["ops"]) - set(OPS):
            raise ValueError(f"arithmetic: 'ops' must be a non-empty subset of {OPS!r}, got {c['ops']!r}")
        if not 1 <= c["min_digits"] <= c["max_digits"] or c["mul_max_digits"] < 1:
            raise ValueError(f"arithmetic: need 1 <= min_digits <= max_digits and mul_max_digits >= 1, got {c}")
        if not 0.0 <= c["direct_frac"] <= 1.0:
            raise ValueError(f"arithmetic: direct_frac must be in [0, 1], got {c['direct_frac']}")

    def _operand(self, rng: random.Random, lo_digits: int, hi_digits: int) -> int:
        digits = rng.randint(lo_digits, hi_digits)
        return rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10**digits - 1)

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:  # noqa: D102
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

    def solution(self, problem: Problem) -> str:
        """The demonstration: the worked scratchpad, or for a ``direct_frac`` share of problems the bare answer."""
        direct = stable_hash(self.id, "demo-style", problem.id) / 2**64 < self._config["direct_frac"]
        return f"Answer: {problem.reference}" if direct else problem.metadata["solution"]

    def canonical_question(self, problem: Problem) -> str:
        a, op, b = problem.metadata["a"], problem.metadata["op"], problem.metadata["b"]
        if op in "+*":  # commutative: 3+5 and 5+3 are the same question
            a, b = sorted((a, b))
        return f"{a}{op}{b}"
