"""Procedural tasks: items generated from a seed, held-out splits frozen to checked-in files.

A procedural item is a pure function of (task id, config, split, index); its seed is
`stable_hash` of those fields. The held-out split of the default configuration is frozen as a
JSONL file with a recorded checksum, so benchmark numbers stay comparable across code versions.
Training items whose canonical question appears in a held-out split are skipped (the next
attempt's seed is drawn), so train and test cannot overlap by construction; the leakage check
(`tasks.leakage`) verifies it.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from abc import abstractmethod
from functools import cached_property
from pathlib import Path
from typing import Any

from envs.types import Problem
from tasks.base import Task, TaskError, stable_hash

DATA_DIR = Path(__file__).parent / "data"
"""Frozen splits of rlvr's own tasks (a plugin's live in its own package, see `ProceduralTask.frozen_dir`)."""


def file_sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def write_jsonl(problems: list[Problem], path: Path) -> str:
    """Write problems as JSONL (one canonical JSON object a line); return the file's checksum."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(p.to_dict(), sort_keys=True, ensure_ascii=False) + "\n")
    return file_sha256(path)


class ProceduralTask(Task):
    """A task whose items are generated.

    Subclasses implement `generate(rng, split, index)` and set:
        split_sizes: size of each finite split (None for unbounded, e.g. train).
        frozen: ``{split: "sha256:..."}`` for splits checked in under ``<frozen_dir>/<id>/``.
        default_config: the configuration the frozen files were generated with.
        frozen_dir: Where the frozen split files live, relative to the folder of the module that
            defines the task class (an absolute path stays as it is); default ``data``: rlvr's
            ``tasks/data`` for its own tasks, a plugin's own package folder for a plugin's.
    """

    max_new_tokens = 128  # short answers (`Task.max_new_tokens`)

    split_sizes: dict[str, int | None] = {"train": None, "test": 500}
    validation_size: int = 200
    """A task whose `split_sizes` list no validation split gets one of this many generated items
    (0: none): hash-seeded like every split, held out, and avoided by the training stream as the
    test split is, so any config that evaluates on ``validation`` works with it."""
    frozen: dict[str, str] = {}
    default_config: dict[str, Any] = {}
    frozen_dir: str | Path | None = None
    demo_keys: frozenset[str] = frozenset()
    """Config keys that only change how demonstrations (worked solutions for SFT) are written,
    not which items exist: they are left out of seeds and do not unfreeze frozen splits."""

    def __init__(self, **config: Any):
        unknown = set(config) - set(self.default_config)
        if unknown:
            raise TaskError(f"{type(self).__name__}: unknown config key(s) {sorted(unknown)}; known: {sorted(self.default_config)}")
        self._config = {**self.default_config, **config}
        if self.validation_size and "train" in self.split_sizes and "validation" not in self.split_sizes:
            self.split_sizes = {**self.split_sizes, "validation": self.validation_size}
            self.heldout_splits = (*self.heldout_splits, "validation")

    @property
    def config(self) -> dict[str, Any]:
        return dict(self._config)

    def data_description(self) -> str:
        frozen = ", ".join(sorted(self.frozen))
        return self.generated_by() + (f"; {frozen} frozen (a checked-in file with a checksum)" if frozen else "")

    def generated_by(self) -> str:
        """What generates the items, for `data_description`."""
        return "generated"

    @property
    def splits(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self.split_sizes)

    @abstractmethod
    def generate(self, rng: random.Random, split: str, index: int) -> Problem:
        """Build one problem from ``rng`` (already seeded for this item)."""

    # -- Task ---------------------------------------------------------------------------------

    def size(self, split: str) -> int | None:
        self.check_split(split)
        return self.split_sizes[split]

    def get(self, split: str, index: int) -> Problem:
        self.check_split(split)
        n = self.split_sizes[split]
        if index < 0 or (n is not None and index >= n):
            raise IndexError(f"{self.id}: index {index} out of range for split {split!r} of size {n}")
        if split in self._frozen_items:
            return self._frozen_items[split][index]
        return self._generate_fresh(split, index)

    def checksum(self, split: str) -> str:
        if split in self._frozen_items:
            return self.frozen[split]
        return super().checksum(split)

    # -- generation ---------------------------------------------------------------------------

    @property
    def item_config(self) -> dict[str, Any]:
        """The configuration that determines the items (everything but `demo_keys`)."""
        return {k: v for k, v in self._config.items() if k not in self.demo_keys}

    def seed_for(self, split: str, index: int, attempt: int = 0) -> int:
        return stable_hash(self.id or type(self).__name__, self.item_config, split, index, attempt)

    def _generate_fresh(self, split: str, index: int) -> Problem:
        """Generate item ``index``, redrawing while it collides with a split held out from it."""
        avoid = self._avoid_hashes(split)
        for attempt in range(1000):
            problem = self.generate(random.Random(self.seed_for(split, index, attempt)), split, index)
            if self.canonical_question(problem) not in avoid:
                return problem
        raise TaskError(f"{self.id}: could not draw a {split!r} item that avoids held-out questions; the config's item space is too small")

    def _avoid_hashes(self, split: str) -> frozenset[str]:
        """Questions ``split`` must not contain: every held-out split for a training split; the
        held-out splits listed before it for a held-out split (validation avoids test)."""
        held = [s for s in self.heldout_splits if s in self.split_sizes]
        avoid = tuple(held[: held.index(split)] if split in held else held)
        if avoid not in self._avoid_cache:
            self._avoid_cache[avoid] = frozenset(
                self.canonical_question(self.get(s, i)) for s in avoid for i in range(self.split_sizes[s] or 0)
            )
        return self._avoid_cache[avoid]

    @cached_property
    def _avoid_cache(self) -> dict[tuple[str, ...], frozenset[str]]:
        return {}

    # -- frozen splits ------------------------------------------------------------------------

    def frozen_folder(self) -> Path:
        """`frozen_dir` (relative to the folder of the module that defines this task's class), by
        default ``data/`` in that folder: a plugin's frozen splits live in its own package."""
        module_file = getattr(sys.modules.get(type(self).__module__), "__file__", None)
        here = Path(module_file).resolve().parent if module_file else Path.cwd()
        if self.frozen_dir is not None:
            return here / self.frozen_dir
        if here == Path(__file__).resolve().parent:
            return DATA_DIR  # rlvr's own tasks
        return here / "data"

    def frozen_path(self, split: str, folder: str | Path | None = None) -> Path:
        """The frozen file of ``split``, under ``folder`` (default: `frozen_folder`)."""
        return Path(folder if folder is not None else self.frozen_folder()) / (self.id or type(self).__name__) / f"{split}.jsonl"

    @cached_property
    def _frozen_items(self) -> dict[str, list[Problem]]:
        """Frozen splits, loaded and checked; only for the default configuration."""
        if self.item_config != {k: v for k, v in self.default_config.items() if k not in self.demo_keys}:
            return {}
        items: dict[str, list[Problem]] = {}
        for split, expected in self.frozen.items():
            path = self.frozen_path(split)
            if not path.exists():
                raise TaskError(f"{self.id}: frozen split file {path} is missing; regenerate it with `rlvr tasks freeze {self.id} --split {split}`")
            actual = file_sha256(path)
            if actual != expected:
                raise TaskError(f"{self.id}: frozen split {path} has checksum {actual}, expected {expected}; the held-out data changed")
            with path.open(encoding="utf-8") as f:
                items[split] = [Problem.from_dict(json.loads(line)) for line in f]
            if len(items[split]) != self.split_sizes[split]:
                raise TaskError(f"{self.id}: {path} holds {len(items[split])} items, expected {self.split_sizes[split]}")
        return items

    def freeze(self, split: str, folder: str | Path | None = None) -> tuple[Path, str]:
        """Generate ``split`` from scratch and write it to its frozen file (under ``folder``, by
        default `frozen_folder`, where the task reads it); returns (path, checksum)."""
        n = self.size(split)
        if n is None:
            raise TaskError(f"cannot freeze unbounded split {split!r}")
        problems = [self._generate_fresh(split, i) for i in range(n)]
        path = self.frozen_path(split, folder)
        return path, write_jsonl(problems, path)
