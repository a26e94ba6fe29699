"""Checkpoints: the model in Hugging Face format plus everything needed to continue exactly
(optimizer, scheduler, RNG, step, data-stream position)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Callable

import torch

from rlvr.train.common import rng_state, set_rng_state

STATE_FILE = "trainer_state.pt"


def save_checkpoint(directory: Path, model: Any, tokenizer: Any, optimizer: Any, scheduler: Any, state: dict[str, Any],
                    extra: dict[str, Callable[[Path], None]] | None = None) -> Path:
    """Write ``directory`` atomically (to a temp name, then renamed). ``extra`` maps a sub-folder
    name to a function that writes more state into it (e.g. PRIME's reward model)."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    for name, write in (extra or {}).items():
        (tmp / name).mkdir()
        write(tmp / name)
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state(), **state}, tmp / STATE_FILE)
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
    return directory


def load_trainer_state(directory: Path, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG from a checkpoint; return the rest of its state."""
    state = torch.load(directory / STATE_FILE, weights_only=False)
    optimizer.load_state_dict(state.pop("optimizer"))
    scheduler.load_state_dict(state.pop("scheduler"))
    set_rng_state(state.pop("rng"))
    return state


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
