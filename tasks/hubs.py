"""Other hubs' environments as rlvr tasks, by a scheme in the task id: ``harbor:DIR`` (a Harbor task
folder, or a folder of them). ``tasks.make`` resolves a ``SCHEME:REST`` id here; each scheme names
the function that builds its task (one registry, no branches)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from envs.types import Problem
from tasks.base import Task, TaskError, stable_hash

SCHEMES: dict[str, str] = {
    "harbor": "tasks.hubs:harbor_task",
}


def is_hub_id(id: str) -> bool:
    scheme, sep, _ = id.partition(":")
    return bool(sep) and scheme in SCHEMES


def make(id: str, **config: Any) -> Task:
    scheme, _, rest = id.partition(":")
    module, _, attr = SCHEMES[scheme].partition(":")
    task = getattr(importlib.import_module(module), attr)(rest, **config)
    task.id = id
    return task


class HarborTask(Task):
    """Harbor task folders under one directory; every folder is one problem of ``test`` (Harbor
    tasks are benchmarks: held out). Prompt: ``instruction.md``; verified by ``hubs/harbor-v1``."""

    env_id = "hubs/harbor-v1"
    splits = ("test",)
    heldout_splits = ("test",)

    def __init__(self, root: str, timeout_s: float = 120.0):
        path = Path(root).expanduser()
        if not path.is_dir():
            raise TaskError(f"harbor:{root}: no such folder (give a Harbor task folder, or a folder of them)")
        found = [path] if (path / "instruction.md").is_file() else sorted(p for p in path.iterdir() if (p / "instruction.md").is_file())
        if not found:
            raise TaskError(f"harbor:{root}: no task folder (one with instruction.md) here")
        for folder in found:
            if not (folder / "tests" / "test.sh").is_file():
                raise TaskError(f"harbor:{root}: {folder.name} has no tests/test.sh, which Harbor needs to write the reward")
        self.folders = found
        self.env_kwargs = {"timeout_s": timeout_s}
        self._root = str(path.resolve())

    @property
    def config(self) -> dict[str, Any]:
        return {"root": self._root}

    def size(self, split: str) -> int:
        self.check_split(split)
        return len(self.folders)

    def get(self, split: str, index: int) -> Problem:
        self.check_split(split)
        folder = self.folders[index]
        return Problem(id=f"test/{folder.name}", prompt=(folder / "instruction.md").read_text(),
                       reference={"task_dir": str(folder.resolve())}, metadata={"harbor_task": folder.name})

    def data_sets(self, split: str) -> frozenset[str]:
        return frozenset({f"harbor:{stable_hash(self._root):x}/{split}"})


def harbor_task(rest: str, **config: Any) -> HarborTask:
    return HarborTask(rest, **config)
