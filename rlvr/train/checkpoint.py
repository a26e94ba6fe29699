"""Checkpoint folders of a run: ``checkpoints/step-N/`` holds one sub-folder per component and
``trainer_state.pt`` (step, recipe state); `rlvr.train.harness.Harness` writes and reads them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

STATE_FILE = "trainer_state.pt"


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
