"""Products of large numbers: out of reach of a scratchpad for the embedded model, one Python call
away with the tool (the ``math-code`` environment).

    Compute 4821*7719.

A demonstration either calls the tool and copies what it printed::

    ```python
    print(4821*7719)
    ```
    ```output                      <- observation (context, not the model's)
    37213299
    ```
    Answer: 37213299

or, for a ``guess_frac`` share of problems (chosen per problem by a hash of its id; demonstrations
only, the items do not change), gives the bare answer, as a demonstrator who knew it would. A
model warmed up on the mix sometimes answers without the tool and is then almost always wrong;
outcome reward alone can teach it when to call the tool.

By default both operands have four digits: the embedded model learns to copy them into its call
and the printed product into its answer in its warm-up (``sft_tool_products``). With operands of
4 to 6 digits its 600-step warm-up learned no copying at all (the digits it copied were no better
than chance).
"""

from __future__ import annotations

import random
from typing import Any

from envs.episode import Turn
from envs.tools.python import render_output
from envs.types import Problem
from tasks.base import stable_hash
from tasks.procedural import ProceduralTask


def tool_call(a: int, b: int) -> str:
    """The model turn that asks the tool for ``a*b``."""
    return f"```python\nprint({a}*{b})\n```\n"


class ToolProductsTask(ProceduralTask):
    """``a*b`` for operands of ``min_digits`` to ``max_digits`` digits (4 and 4 by default), verified by ``math-code-v1``.

    Config:
        min_digits / max_digits: Digit count range of each operand.
        guess_frac: Fraction of demonstrations that answer without calling the tool (demonstrations
            only: the items and the frozen test split do not depend on it).
    """

    env_id = "math-code-v1"
    # the embedded model reads its demonstrations, not instructions; episodes fit its 256 positions
    env_kwargs: dict[str, Any] = {"instructions": "", "max_turns": 3, "max_tokens": 160, "output_chars": 64}
    split_sizes = {"train": None, "validation": 200, "test": 500}
    heldout_splits = ("test", "validation")
    default_config: dict[str, Any] = {"min_digits": 4, "max_digits": 4, "guess_frac": 0.0}
    demo_keys = frozenset({"guess_frac"})
    frozen = {"test": "sha256:58a1459ce9cb2cff3cce65fbe7071a3e395571ff02cf106b8f544420f71d802c"}

    def __init__(self, **config: Any):
        super().__init__(**config)
        c = self._config
        if not 2 <= c["min_digits"] <= c["max_digits"] <= 12:
            raise ValueError(f"tool-products: need 2 <= min_digits <= max_digits <= 12, got {c['min_digits']} and {c['max_digits']}")
        if not 0.0 <= c["guess_frac"] <= 1.0:
            raise ValueError(f"tool-products: guess_frac must be in [0, 1], got {c['guess_frac']}")

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(self._config["min_digits"], self._config["max_digits"])
        return rng.randint(10 ** (digits - 1), 10**digits - 1)

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:  # noqa: D102
        a, b = self._operand(rng), self._operand(rng)
        return Problem(id=f"{split}/{index}", prompt=f"Compute {a}*{b}.\n", reference=str(a * b), metadata={"a": a, "b": b})

    def guesses(self, problem: Problem) -> bool:
        """Whether this problem's demonstration answers without the tool."""
        return stable_hash(self.id, "demo-style", problem.id) / 2**64 < self._config["guess_frac"]

    def demonstration(self, problem: Problem) -> list[Turn]:
        """The demonstration as an episode: a tool call, its output, the copied answer (or a bare answer)."""
        answer = Turn.model(f"Answer: {problem.reference}")
        if self.guesses(problem):
            return [answer]
        a, b = problem.metadata["a"], problem.metadata["b"]
        return [Turn.model(tool_call(a, b)), Turn.observation(render_output(f"{a * b}\n")), answer]

    def solution(self, problem: Problem) -> str:
        """The demonstration's transcript as one text (observations included: a trainer that masks
        them out uses `demonstration`)."""
        return "".join(t.text for t in self.demonstration(problem))

    def canonical_question(self, problem: Problem) -> str:
        a, b = sorted((problem.metadata["a"], problem.metadata["b"]))
        return f"{a}*{b}"
