"""What every export shares: the request (environment, task, splits), the frozen problem files with
their checksums, and the result to print.

Each exported split is one JSONL file of problems (``Problem.to_dict``) and the manifest
(``rlvr_export.json``) records the environment id and keyword arguments, the task and its config,
each split's size and sha256 (`tasks.problems_checksum`) and which splits are held out, so the hub
side can check that it reads the data rlvr wrote and that train and test do not overlap.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import envs
from envs.episode import MultiTurnEnvironment
from envs.types import Problem
from rlvr.hubs import HubError

MANIFEST = "rlvr_export.json"
DEFAULT_UNBOUNDED_LIMIT = 1000
HUB_TAGS = {"verifiers": "vf", "skyrl-gym": "skyrl", "openenv": "openenv", "nemo-gym": "nemo", "harbor": "harbor"}
"""The hub's part of a default export name: two hubs' exports of one task never share a package."""


@dataclass
class ExportRequest:
    """An export to do (built by `rlvr.hubs.export`).

    Attributes:
        hub: The hub's name.
        env_id: The environment's registered id.
        env: The environment, built once (its kind decides single- or multi-turn).
        task: The task whose problems are exported, or None (the environment's ``examples()``).
        out: The folder to write.
        splits: ``{split: problems}``.
        name: A Python identifier for the package or server.
    """

    hub: str
    env_id: str
    env_kwargs: dict[str, Any]
    env: envs.Environment
    task: Any
    out: Path
    splits: dict[str, list[Problem]]
    name: str

    @property
    def multi_turn(self) -> bool:
        return isinstance(self.env, MultiTurnEnvironment)

    @classmethod
    def make(cls, hub: str, env_id: str, task, out, *, splits: list[str] | None = None, limit: int | None = None,
             name: str | None = None) -> ExportRequest:
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise HubError(f"--out {out} exists and is not an empty folder; choose a new one")
        if limit is not None and limit < 1:
            raise HubError(f"--limit must be >= 1, got {limit}")
        if task is not None:
            env, env_kwargs = task.env, dict(task.env_kwargs)
            chosen = splits or list(task.splits)
            data = {}
            for split in chosen:
                task.check_split(split)
                size = task.size(split)
                n = limit if limit is not None else (DEFAULT_UNBOUNDED_LIMIT if size is None else size)
                data[split] = task.problems(split, limit=n)
        else:
            env, env_kwargs = envs.make(env_id), {}
            examples = env.examples()
            if not examples:
                raise HubError(f"{env_id} has no task bound to it and no examples(): pass --task")
            if splits and splits != ["test"]:
                raise HubError(f"{env_id} without a task has only its examples, written as split 'test'")
            data = {"test": examples[:limit] if limit else examples}
        tag = HUB_TAGS.get(hub, hub)
        default = re.sub(r"\W+", "_", f"rlvr_{tag}_{envs.parse_id(env_id).name}_{task.id if task is not None else 'examples'}").strip("_").lower()
        name = name or default
        if not name.isidentifier() or keyword.iskeyword(name):
            raise HubError(f"--name must be a Python identifier (letters, digits, _), got {name!r}")
        shadowed = shadowed_module(name)
        if shadowed:
            raise HubError(f"--name {name!r} is {shadowed}: the exported package would shadow it; choose another name")
        return cls(hub, env_id, env_kwargs, env, task, out, data, name)

    @property
    def heldout(self) -> list[str]:
        return list(self.task.heldout_splits) if self.task is not None else ["test"]

    @property
    def default_split(self) -> str:
        """The split a session plays when none is named: the first exported split that is not held
        out (training must never default to test problems), else the first one."""
        return next((s for s in self.splits if s not in self.heldout), next(iter(self.splits)))

    def checksums(self) -> dict[str, str]:
        """``{split: checksum}`` of the exported problems (also the sha256 of each split's file)."""
        from tasks import problems_checksum

        return {s: problems_checksum(ps) for s, ps in self.splits.items()}

    def manifest(self) -> dict[str, Any]:
        from tasks import problems_checksum

        heldout = self.heldout
        return {
            "format": 1, "hub": self.hub, "env": self.env_id, "env_kwargs": self.env_kwargs,
            "task": self.task.id if self.task is not None else None,
            "task_config": self.task.config if self.task is not None else {},
            "multi_turn": self.multi_turn,
            "splits": {s: {"size": len(ps), "checksum": problems_checksum(ps), "heldout": s in heldout} for s, ps in self.splits.items()},
        }

    def write_data(self, folder: Path) -> list[Path]:
        """The split files and the manifest in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for split, problems in self.splits.items():
            path = folder / f"{split}.jsonl"
            path.write_text("".join(json.dumps(p.to_dict(), ensure_ascii=False, sort_keys=True) + "\n" for p in problems))
            written.append(path)
        path = folder / MANIFEST
        path.write_text(json.dumps(self.manifest(), indent=2, sort_keys=True) + "\n")
        return [*written, path]


@dataclass
class ExportResult:
    """What an export wrote, and how to run it."""

    hub: str
    out: Path
    files: list[Path] = field(default_factory=list)
    run: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"wrote {len(self.files)} files for {self.hub} to {self.out}"]
        if self.run:
            lines.append("run it:")
            lines += [f"  {line}" for line in self.run]
        return "\n".join(lines)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def read_split(folder: Path, split: str, checksum: str | None = None) -> list[Problem]:
    """The problems an export wrote for ``split``, checked against the manifest's checksum and
    ``checksum`` (the one the exported code carries, so a manifest edited to match changed data is
    caught too); a mismatch is a `HubError` naming the file."""
    from tasks import problems_checksum

    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    if split not in manifest["splits"]:
        raise HubError(f"{folder}: no split {split!r}; exported splits: {', '.join(manifest['splits'])}")
    path = folder / f"{split}.jsonl"
    try:
        problems = [Problem.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    except (ValueError, KeyError, TypeError) as e:
        raise HubError(f"{path} is not the exported problems ({type(e).__name__}: {e}): the exported data was changed") from None
    got = problems_checksum(problems)
    for want, where in ((manifest["splits"][split]["checksum"], MANIFEST), (checksum, "the exported package's code")):
        if want is not None and got != want:
            raise HubError(f"{path} does not match its checksum in {where}: the exported data was changed")
    return problems


def literal(value: Any) -> str:
    """``value`` as Python source (JSON data parsed at import: never JSON pasted into code, where
    ``false`` and ``null`` are not Python)."""
    return f"json.loads({json.dumps(json.dumps(value, sort_keys=True))})"


def shadowed_module(name: str) -> str | None:
    """What an exported package called ``name`` would shadow (a description), or None: rlvr's own
    packages, the standard library, or any importable top-level module that is not an earlier rlvr
    export (one with an ``rlvr_export.json`` in its folder: exporting it again is fine)."""
    import importlib.util

    from rlvr.hubs.wheel import PACKAGES

    if name in PACKAGES:
        return "one of rlvr's own packages"
    if name in sys.stdlib_module_names:
        return "a module of Python's standard library"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or ():
        if any(Path(folder).glob(f"*/{MANIFEST}")) or (Path(folder) / MANIFEST).is_file():
            return None
    return f"an importable module here ({spec.origin or 'a namespace package'})"


def package_pyproject(name: str, description: str, requires_python: str, dependencies: list[str]) -> str:
    """The ``pyproject.toml`` of an exported package: module ``name`` with its ``data/`` files."""
    return f'''[project]
name = "{name.replace("_", "-")}"
version = "0.1.0"
description = "{description}"
requires-python = "{requires_python}"
dependencies = {json.dumps(dependencies)}

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{name}"]

[tool.setuptools.package-data]
{name} = ["data/*"]
'''
