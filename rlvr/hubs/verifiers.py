"""Export to verifiers (v1): a taskset package that ``vf-eval NAME`` and prime-rl load
(``rlvr envs export ID --to verifiers --out DIR``).

Written::

    DIR/pyproject.toml
    DIR/NAME/__init__.py       __all__ = [the Taskset (and, multi-turn, the Env)]
    DIR/NAME/taskset.py        subclasses of rlvr.hubs.verifiers_runtime bound to this export's data
    DIR/NAME/data/SPLIT.jsonl  the frozen problems; rlvr_export.json their checksums

The split is the taskset's config: ``train`` (the first split not held out) unless named
(``--env.taskset.split test`` to evaluate); the reward is rlvr's verdict. The taskset reads its
split only if it matches the checksum the package's code carries (``CHECKSUMS`` of the taskset class,
not a config field, so no override switches the check off) and the manifest's.
"""

from __future__ import annotations

from rlvr.hubs import require
from rlvr.hubs.common import ExportRequest, ExportResult, literal, package_pyproject, write

TASKSET = '''"""{env} on {task}, exported by rlvr as a verifiers taskset. Rewards come from rlvr's own
verifier (install rlvr beside verifiers)."""

import json
from pathlib import Path
from typing import ClassVar

import verifiers.v1 as vf

from rlvr.hubs.verifiers_runtime import RlvrEpisodeEnv, RlvrTask, RlvrTaskConfig, RlvrTaskset, RlvrTasksetConfig


class {cls}TaskConfig(RlvrTaskConfig):
    env: str = {env_id!r}
    env_kwargs: dict = {env_kwargs}


class {cls}Config(RlvrTasksetConfig):
    data_dir: str = str(Path(__file__).parent / "data")
    split: str = {split!r}
    """The split to play: {split_note}; held-out splits ({heldout}) are for evaluation."""
    task: {cls}TaskConfig = {cls}TaskConfig()


class {cls}Taskset(RlvrTaskset, vf.Taskset[RlvrTask, {cls}Config]):
    """{env} on {task} (splits: {splits})."""

    CHECKSUMS: ClassVar[dict] = {checksums}
    """The exported splits' checksums, in the code (not the config: an override could switch the check off)."""


class {cls}Env(RlvrEpisodeEnv):
    """Multi-turn episodes: each tool call's output is the next user turn."""
'''


def export(request: ExportRequest) -> ExportResult:
    require("verifiers.v1", "verifiers")
    out, name = request.out, request.name
    package = out / name
    files = request.write_data(package / "data")
    cls = "".join(part.capitalize() for part in name.split("_"))
    split = request.default_split
    heldout = [s for s in request.splits if s in request.heldout]
    files.append(write(package / "taskset.py", TASKSET.format(
        env=request.env_id, task=request.task.id if request.task else "examples", cls=cls, env_id=request.env_id,
        env_kwargs=literal(request.env_kwargs), split=split, splits=", ".join(request.splits), heldout=", ".join(heldout) or "none",
        split_note=f"{split!r}, held out (this export has no training split)" if split in heldout else f"{split!r} for training",
        checksums=literal(request.checksums()))))
    exported = [f"{cls}Taskset"] + ([f"{cls}Env"] if request.multi_turn else [])
    files.append(write(package / "__init__.py", f"from {name}.taskset import {', '.join(exported)}\n\n__all__ = {exported!r}\n"))
    files.append(write(out / "pyproject.toml", package_pyproject(name, "An rlvr environment exported as a verifiers taskset", ">=3.11",
                                                                ["rlvr", "verifiers>=0.4"])))

    run = [f"pip install -e {out}",
           f"vf-eval {name} --model MODEL --client.base-url URL --env.agent.harness.id null --env.agent.runtime.type subprocess "
           f"--env.taskset.split {split} -n 10 --no-push"]
    run += [f"vf-eval {name} ... --env.taskset.split {s}   # held out: evaluate only" for s in heldout if s != split]
    return ExportResult("verifiers", out, files, run)
