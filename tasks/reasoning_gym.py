"""reasoning-gym's procedural generators as rlvr tasks (``pip install 'rlvr[reasoning-gym]'``).

reasoning-gym (PyPI ``reasoning-gym``) builds each item from ``Random(seed + index)``, so two
datasets with seeds 0 and 1 share all but one item: a naive "train = seed 0, test = seed 1"
wrapper trains on its own test set. Here, as for every procedural task, an item is a pure function
of (task id, config, split, index): its seed is `stable_hash` of those fields, and the item is
drawn from a fresh generator built with that seed (index 0), so adjacent indices and different
splits get unrelated items. Training items whose question appears in a held-out split are
redrawn, and `rlvr tasks leakage ID` proves the result.

Two kinds of task:

- ``reasoning-gym-v1``: any generator by name (``task.config={dataset: spell_backward, ...}``,
  the other keys being that generator's own config fields; default ``number_sorting``), verified
  by the generator's own scorer (`envs.reasoning_gym`); its splits are generated, not frozen,
  since the config is the user's.
- ``reasoning-gym/sum-chain-v1``: ``basic_arithmetic`` restricted to sums and differences of
  small numbers, with worked running-total demonstrations, verified by rlvr's math checker, with
  a frozen test split (a generator can change between reasoning-gym versions; the held-out
  numbers must not).
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

from envs.types import Problem
from tasks.base import TaskError, stable_hash
from tasks.procedural import ProceduralTask

_RESERVED = frozenset({"seed", "size"})  # set per item by the wrapper, never by the user


def _reasoning_gym():
    try:
        import reasoning_gym
    except ImportError as e:
        raise TaskError(f"reasoning-gym is not installed ({e}); install it with: pip install 'rlvr[reasoning-gym]'") from e
    return reasoning_gym


def generator_defaults(dataset: str) -> dict[str, Any]:
    """The config fields of reasoning-gym generator ``dataset`` and their defaults (seed and size left out)."""
    _reasoning_gym()
    from reasoning_gym.factory import DATASETS

    if dataset not in DATASETS:
        import difflib

        close = difflib.get_close_matches(dataset, list(DATASETS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; {len(DATASETS)} exist (reasoning_gym.factory.DATASETS)"
        raise TaskError(f"reasoning-gym has no generator {dataset!r}{hint}")
    config_cls = DATASETS[dataset][1]
    defaults = {}
    for f in dataclasses.fields(config_cls):
        if f.name in _RESERVED:
            continue
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return _jsonable(defaults, f"{dataset} config")


def _jsonable(value: Any, where: str) -> Any:
    """``value`` as plain JSON data (tuples and sets become lists); anything else is refused by name."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v, where) for v in value), key=repr)
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _jsonable(value.tolist(), where)
    raise TaskError(f"{where}: {type(value).__name__} value {value!r} is not JSON data; this generator cannot be wrapped as is")


class ReasoningGymTask(ProceduralTask):
    """Any reasoning-gym generator, scored by its own ``score_answer`` (env ``reasoning-gym-v1``).

    Config:
        dataset: The generator's name (``reasoning_gym.factory.DATASETS``; default ``number_sorting``).
        Every other key is a field of that generator's config dataclass (``seed`` and ``size`` are
        the wrapper's), defaulting to the generator's defaults.

    Demonstrations are the bare answer (``Answer: ...``): reasoning-gym items carry no worked
    solution.
    """

    env_id = "reasoning-gym-v1"
    split_sizes = {"train": None, "validation": 200, "test": 500}
    heldout_splits = ("test", "validation")
    dataset: str = "number_sorting"
    """The generator when the config names none (a cheap one with a structured answer)."""
    dataset_fixed: bool = False
    """Subclasses built around one generator (worked demonstrations) refuse another."""
    rlvr_defaults: dict[str, Any] = {}
    """Config keys of the wrapper itself (e.g. demonstration style), beside the generator's fields."""

    def __init__(self, **config: Any):
        dataset = config.pop("dataset", self.dataset)
        if self.dataset_fixed and dataset != self.dataset:
            raise TaskError(f"{type(self).__name__} always wraps {self.dataset!r}; use reasoning-gym-v1 with dataset={dataset!r}")
        if not isinstance(dataset, str) or not dataset:
            raise TaskError(f"reasoning-gym: task.config.dataset must be a generator name such as 'chain_sum', got {dataset!r}")
        reserved = _RESERVED & set(config)
        if reserved:
            raise TaskError(f"{dataset}: {sorted(reserved)} are set per item by the wrapper (seeds come from (task, config, split, index))")
        self.default_config = {"dataset": dataset, **generator_defaults(dataset), **self.rlvr_defaults, **self.class_defaults()}
        super().__init__(dataset=dataset, **_jsonable(config, f"{dataset} config"))
        self._generator_config = {k: v for k, v in self._config.items() if k not in self.rlvr_defaults and k != "dataset"}
        try:  # validate now (one clear error), not on the first item
            self._build(0)
        except TaskError:
            raise
        except Exception as e:
            raise TaskError(f"{dataset}: invalid config {self._generator_config}: {type(e).__name__}: {e}") from e

    def class_defaults(self) -> dict[str, Any]:
        """Generator settings a subclass changes from reasoning-gym's defaults."""
        return {}

    def generated_by(self) -> str:
        chosen = f"`{self.dataset}` generator" if self.dataset_fixed else f"generator named by `task.config.dataset` (default `{self.dataset}`)"
        return f"generated by reasoning-gym's {chosen} (needs `pip install 'rlvr[reasoning-gym]'`)"

    def _build(self, seed: int):
        return _reasoning_gym().create_dataset(self._config["dataset"], seed=seed, size=1, **self._generator_config)

    def generate(self, rng: random.Random, split: str, index: int) -> Problem:  # noqa: D102
        # One fresh generator per item, seeded from this item's hash: faithful to every generator
        # (some read their seed when built), unlike indexing one generator at ``seed + index``.
        seed = rng.getrandbits(32)
        entry = self._build(seed)[0]
        name = self._config["dataset"]
        return Problem(
            id=f"{split}/{index}",
            prompt=entry["question"] + "\n",
            reference=str(entry["answer"]),
            metadata={
                "reasoning_gym": {
                    "dataset": name,
                    "config": self._generator_config,
                    "seed": seed,
                    "metadata": _jsonable(entry.get("metadata", {}), f"{name} item metadata"),
                },
            },
        )

    def solution(self, problem: Problem) -> str:
        return f"Answer: {problem.reference}"

    def describe(self) -> dict[str, Any]:
        import importlib.metadata

        return {**super().describe(), "reasoning_gym_version": importlib.metadata.version("reasoning-gym")}


class SumChainTask(ReasoningGymTask):
    """reasoning-gym's ``basic_arithmetic`` restricted to chains of + and - (``Calculate 7 + 2 - 5.``),
    with worked demonstrations, checked by ``math-v1``.

    (reasoning-gym's ``chain_sum`` draws the same sums but wraps each in a 60-character sentence,
    which costs the embedded model most of its compute; this generator's prompt is short.)

    The numeric answer is checked by rlvr's math checker rather than the generator's scorer: its
    extraction is strict (no ``Answer:`` line → ``no_answer``), its comparison exact, and it gives
    step rewards for the running-total lines, which are true equalities::

        Calculate 7 + 2 - 5.
        7+2=9
        9-5=4
        Answer: 4

    Config: basic_arithmetic's own fields (default: three one-digit terms, + and -; ``operators``
    must stay within + and -, without parentheses, for the running totals to be the answer), and
        direct_frac: Fraction of demonstrations that give the bare answer without the running
            totals (chosen per problem by a hash of its id; does not change the problems). A model
            warmed up on the mix sometimes answers directly and is then often wrong; outcome
            reward teaches it to work.
    """

    env_id = "math-v1"
    dataset = "basic_arithmetic"
    dataset_fixed = True
    rlvr_defaults = {"direct_frac": 0.0}
    demo_keys = frozenset({"direct_frac"})
    frozen = {"test": "sha256:e262dfd3425bc82958caa73c87af763fd9702db724b1a1f18dca9448145ac777"}  # `rlvr tasks freeze`

    def class_defaults(self) -> dict[str, Any]:
        return {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"], "allow_parentheses": False}

    def __init__(self, **config: Any):
        super().__init__(**config)
        c = self._config
        if not c["operators"] or set(c["operators"]) - {"+", "-"} or c["allow_parentheses"]:
            raise TaskError(f"sum-chain: operators must be + and/or - without parentheses (running totals), got operators={c['operators']}, allow_parentheses={c['allow_parentheses']}")
        if not 0.0 <= c["direct_frac"] <= 1.0:
            raise TaskError(f"sum-chain: direct_frac must be in [0, 1], got {c['direct_frac']}")

    def solution(self, problem: Problem) -> str:
        """The running totals then the answer, or for a ``direct_frac`` share of problems the bare answer."""
        direct = stable_hash(self.id, "demo-style", problem.id) / 2**64 < self._config["direct_frac"]
        if direct:
            return f"Answer: {problem.reference}"
        return "\n".join(running_totals(problem.metadata["reasoning_gym"]["metadata"]["expression"]) + [f"Answer: {problem.reference}"])


_TERM = re.compile(r"\s*([+-])\s*(\d+)")


def running_totals(expression: str) -> list[str]:
    """``"7 + 2 - 5"`` → ``["7+2=9", "9-5=4"]``: one true equality per operator, left to right."""
    first = re.match(r"\s*(\d+)", expression)
    terms = _TERM.findall(expression, first.end()) if first else []
    if not first or not terms or "".join(o + t for o, t in terms) != re.sub(r"\s+", "", expression[first.end():]):
        raise ValueError(f"not a chain of + and - over non-negative integers: {expression!r}")
    total, lines = int(first.group(1)), []
    for op, term in terms:
        new = total + int(term) if op == "+" else total - int(term)
        lines.append(f"{total}{op}{term}={new}")
        total = new
    return lines
