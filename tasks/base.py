"""The `Task` contract: a named suite of problems with honest splits, bound to an environment."""

from __future__ import annotations

import hashlib
import json
import random
import re
from abc import ABC, abstractmethod
from functools import cached_property
from typing import Any, Iterator

import envs
from envs.episode import Turn
from envs.types import Problem


class TaskError(ValueError):
    """A task was misconfigured or its data is unusable; the message names the field or file."""


def stable_hash(*fields: Any) -> int:
    """A 64-bit integer that depends only on ``fields`` (JSON-serialisable values).

    Used for seeds: ``stable_hash(task_id, config, split, index)`` gives unrelated streams for
    adjacent indices, unlike ``seed + index``.
    """
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big")


def unknown_config_keys(factory: Any, config: dict[str, Any], what: str, positional: int = 0) -> TaskError | None:
    """The one-line error for ``config`` keys that ``factory`` does not take, listing the ones it
    does (None when it takes them all, or any keyword). ``positional``: leading parameters that
    are not config (a hub id's path); a factory that hands its config on names the callee in
    ``config_of``."""
    import inspect

    try:
        params = list(inspect.signature(getattr(factory, "config_of", factory)).parameters.values())[positional:]
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    known = sorted(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
    unknown = sorted(set(config) - set(known))
    if not unknown:
        return None
    return TaskError(f"{what}: unknown config key(s) {unknown}; known: {known if known else 'none (it takes no config)'}")


def canonical_text(text: str) -> str:
    """Lower-case, whitespace-collapsed text: two questions equal under this are the same item."""
    return re.sub(r"\s+", " ", text).strip().lower()


def hash_split(question: str, test_fraction: float, validation_fraction: float) -> str:
    """``"test"``, ``"validation"`` or ``"train"`` for a question, by a hash of its canonical text:
    the first ``test_fraction`` of the hash range is test, the next ``validation_fraction``
    validation. A row's split depends on nothing else (not the row order, not the other rows), so
    it is the same on every load and after rows are added, and a question repeated in the data
    lands in one split only."""
    h = stable_hash(canonical_text(question))
    test_cut, validation_cut = int(test_fraction * 2**64), int((test_fraction + validation_fraction) * 2**64)
    return "test" if h < test_cut else "validation" if h < validation_cut else "train"


def problems_checksum(problems: list[Problem]) -> str:
    """sha256 over the canonical JSON of the problems, in order."""
    h = hashlib.sha256()
    for p in problems:
        h.update(json.dumps(p.to_dict(), sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


class Task(ABC):
    """A named suite of problems.

    Subclasses set `env_id` (and optionally `env_kwargs`), list their `splits`, and implement
    `size` and `get`. Items must be a pure function of (task id, config, split, index).

    Attributes:
        id: The registered id (e.g. ``"arithmetic-v1"``), set by `tasks.make`.
        env_id: The environment that verifies this task's problems.
        env_kwargs: Keyword arguments for that environment.
        splits: The split names this task provides.
        heldout_splits: Splits that training must never read.
        max_new_tokens: The completion budget an evaluation gives each answer by default (``rlvr
            eval`` without ``--max-new-tokens``): room for the reasoning this task's answers need.
    """

    id: str = ""
    env_id: str = ""
    env_kwargs: dict[str, Any] = {}
    splits: tuple[str, ...] = ("train", "test")
    heldout_splits: tuple[str, ...] = ("test",)
    max_new_tokens: int = 512

    @property
    def config(self) -> dict[str, Any]:
        """The task's configuration (recorded in reports, part of every procedural seed)."""
        return {}

    @abstractmethod
    def size(self, split: str) -> int | None:
        """Number of problems in ``split``; None for an unbounded procedural stream."""

    @abstractmethod
    def get(self, split: str, index: int) -> Problem:
        """Problem number ``index`` of ``split``."""

    # -- derived ------------------------------------------------------------------------------

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise TaskError(f"task {self.id or type(self).__name__!r} has no split {split!r}; its splits: {', '.join(self.splits)}")

    def set_env(self, env_id: str | None, env_kwargs: dict[str, Any], *, names: tuple[str, str] = ("task.env", "task.env_kwargs")) -> None:
        """Change the verifying environment, as training's ``task.env``/``task.env_kwargs`` and
        ``rlvr eval --env/--env-kwargs`` both do: with ``env_id`` the environment is replaced
        (built with ``env_kwargs`` alone); without it ``env_kwargs`` are merged over the task's own.
        The environment is built now, so a bad id or setting fails before any model loads, as a
        one-line `TaskError` naming the setting (``names``: how the user spells id and settings)."""
        if env_id:
            self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        elif env_kwargs:
            self.env_kwargs = {**self.env_kwargs, **env_kwargs}
        else:
            return
        self.__dict__.pop("env", None)  # a cached environment was built with the old settings
        try:
            self.env  # noqa: B018 - build it now
        except (TypeError, ValueError, LookupError) as e:
            field = "/".join(name for name, given in zip(names, (env_id, env_kwargs)) if given)
            if isinstance(e, LookupError):  # an unknown id: the registry's message names it and what exists
                raise TaskError(f"{field}: {e}") from None
            problem = f"does not accept {dict(env_kwargs)}" if isinstance(e, TypeError) else "refused its settings"
            raise TaskError(f"{field}: environment {self.env_id!r} {problem}: {e}") from None

    def problems(self, split: str, limit: int | None = None) -> list[Problem]:
        """All problems of a finite split (or the first ``limit``)."""
        self.check_split(split)
        n = self.size(split)
        if n is None:
            if limit is None:
                raise TaskError(f"split {split!r} of {self.id!r} is unbounded: pass a limit")
            n = limit
        return [self.get(split, i) for i in range(min(n, limit) if limit is not None else n)]

    def stream(self, split: str, start: int = 0, seed: int = 0) -> Iterator[Problem]:
        """Problems for training, from stream position ``start`` onwards, forever.

        An unbounded split yields items ``start, start+1, ...``; a finite split is reshuffled each
        epoch with a permutation seeded by (task, split, seed, epoch). Position ``k`` is always the
        same problem, so a resumed run continues exactly where it stopped.
        """
        self.check_split(split)
        n = self.size(split)
        pos = start
        while True:
            if n is None:
                yield self.get(split, pos)
            else:
                if n == 0:
                    raise TaskError(f"split {split!r} of {self.id!r} is empty")
                epoch, offset = divmod(pos, n)
                order = list(range(n))
                random.Random(stable_hash(self.id, split, seed, epoch)).shuffle(order)
                for i in order[offset:]:
                    yield self.get(split, i)
                    pos += 1
                continue
            pos += 1

    def checksum(self, split: str) -> str:
        """Identifies the exact data of a finite split (recorded in evaluation reports)."""
        return problems_checksum(self.problems(split))

    def canonical_question(self, problem: Problem) -> str:
        """Text that is equal for two problems that are the same question (leakage checks)."""
        prompt = problem.prompt if isinstance(problem.prompt, str) else " ".join(m["content"] for m in problem.prompt)
        return canonical_text(prompt)

    def solution(self, problem: Problem) -> str | None:
        """A worked gold completion for supervised warm-up, if the task has one."""
        return problem.metadata.get("solution")

    def demonstration(self, problem: Problem) -> list[Turn] | None:
        """A worked episode for supervised warm-up: model turns and the observations between them
        (`rlvr.rollout.episodes.tokenize_demonstration` masks observations out of the loss).
        Default: the `solution` as one model turn."""
        solution = self.solution(problem)
        return [Turn.model(solution)] if solution else None

    @cached_property
    def env(self) -> envs.Environment:
        """The environment that verifies this task (built once per task object)."""
        return envs.make(self.env_id, **self.env_kwargs)

    def data_sets(self, split: str) -> frozenset[str]:
        """Names of the underlying collections of problems that ``split`` consists of or overlaps.

        Two (task, split) pairs whose sets intersect may share problems (see `assert_disjoint`).
        Default: the task's unversioned name and the split (``"gsm8k/test"``), so versions of a
        task share data. Tasks built from another task's data declare it here (MATH-500 declares
        the part of MATH test it was drawn from).
        """
        self.check_split(split)
        base = envs.parse_id(self.id).base if self.id else type(self).__name__
        return frozenset({f"{base}/{split}"})

    def data_description(self) -> str:
        """Where the problems come from, in a line (the task reference, docs/reference/tasks.md)."""
        return ""

    def describe(self) -> dict[str, Any]:
        """What a report records about the task."""
        return {"id": self.id, "env": self.env_id, "config": self.config, "splits": list(self.splits)}


TaskSplit = tuple[Any, str]
"""A ``(task, split)`` pair; the task is a `Task` or a registered id."""


def assert_disjoint(train: TaskSplit, heldout: list[TaskSplit] | tuple[TaskSplit, ...]) -> None:
    """Refuse to train on ``train`` when it may share problems with any held-out pair.

    Raises `TaskError` naming both pairs and the shared collection, e.g. training on
    ``("hendrycks-math-v1", "test")`` while ``("math500-v1", "test")`` is held out: MATH-500 is a
    subset of MATH test. Pairs are compared by `Task.data_sets`, so no data is loaded.
    """
    train_task, train_split = _resolve(train)
    train_sets = train_task.data_sets(train_split)
    for pair in heldout:
        task, split = _resolve(pair)
        shared = train_sets & task.data_sets(split)
        if shared:
            raise TaskError(
                f"training on {train_task.id or type(train_task).__name__}:{train_split} would leak into held-out "
                f"{task.id or type(task).__name__}:{split}: both contain {', '.join(sorted(shared))}. "
                "Train on a disjoint split instead (for MATH with MATH-500 held out: hendrycks-math-v1:train "
                "or hendrycks-math-v1:test_rest)."
            )


def _resolve(pair: TaskSplit) -> tuple[Task, str]:
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], str)):
        raise TaskError(f"expected a (task, split) pair, got {pair!r}")
    task, split = pair
    if isinstance(task, str):
        import tasks

        task = tasks.make(task)
    if not isinstance(task, Task):
        raise TaskError(f"expected a Task or task id in {pair!r}, got {type(task).__name__}")
    task.check_split(split)
    return task, split
