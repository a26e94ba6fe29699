"""Checkpoint folders of a run: ``checkpoints/step-N/`` holds one sub-folder per component and
``trainer_state.pt`` (step, recipe state); `rlvr.train.harness.Harness` writes and reads them.
A checkpoint is written as ``step-N.tmp`` and renamed when complete, so a ``.tmp`` folder is
always a partial write (a kill or a full disk) and is removed."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.pt"
PARTIAL_SUFFIX = ".tmp"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``root`` as (step, path), oldest first."""
    found = []
    for p in root.glob("step-*"):
        m = re.fullmatch(r"step-(\d+)", p.name)
        if m and (p / STATE_FILE).exists():
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune_checkpoints(root: Path, keep: int) -> None:
    for _, path in list_checkpoints(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(path, ignore_errors=True)


def remove_partial_checkpoints(root: Path) -> list[Path]:
    """Delete the partial ``step-N.tmp`` folders under ``root`` (they can never be resumed and may
    hold the space the next checkpoint needs); returns what was removed."""
    partial = [p for p in root.glob(f"step-*{PARTIAL_SUFFIX}") if p.is_dir()]
    for p in partial:
        shutil.rmtree(p, ignore_errors=True)
    return partial


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def is_out_of_space(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) is a full disk or quota. torch and
    safetensors wrap the OSError in their own exceptions, hence the walk along the chain."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return True
        if "No space left on device" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def free_bytes(path: Path) -> int:
    """Free space on the filesystem that holds ``path`` (or its nearest existing parent)."""
    return shutil.disk_usage(next((p for p in [path, *path.parents] if p.exists()), Path("."))).free


def out_of_space_message(path: Path, needed_bytes: int | None = None) -> str:
    """One line naming ``path``, the space it needs (when known) and what is free there."""
    free = free_bytes(path)
    need = f"about {_human(needed_bytes)} needed, " if needed_bytes else ""
    return f"no space left on device writing {path} ({need}{_human(free)} free there)"


def _human(n: int) -> str:
    size, unit = float(n), "B"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            break
        size /= 1024
    return f"{size:.0f} B" if unit == "B" else f"{size:.1f} {unit}"
