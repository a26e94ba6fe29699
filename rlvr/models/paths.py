"""Where a model named on the command line lives: a local model directory, a GGUF file or a
built-in name (both converted once into a cached directory, `rlvr.models.sources`), or a hub id
worth asking the hub for. Imports nothing heavy for a directory or a wrong path, so a wrong path is
reported before torch loads."""

from __future__ import annotations

import os
import re
from pathlib import Path

from rlvr import UserError

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
"""A Hugging Face model id: ``name`` or ``namespace/name``."""


def resolve_model(name_or_path: str) -> str:
    """The local model directory ``name_or_path`` names, or the hub id to download; raises
    `UserError` with what to pass instead for a run folder, a missing path, or an unreachable hub.

    A built-in name (`rlvr models list`) or a ``.gguf`` file resolves to its converted directory
    in the model cache, converting it on first use (`rlvr.models.sources.resolve_source`): every
    caller gets a plain Hugging Face directory."""
    from rlvr.models import sources

    if sources.is_source(str(name_or_path)) and not Path(name_or_path).expanduser().is_dir():
        return sources.resolve_source(str(name_or_path))
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        if (local / "config.json").is_file() or (local / "adapter_config.json").is_file():  # a model, or LoRA adapters on one
            return str(local)
        found = models_inside(local)
        if found:
            hint = " or ".join(str(p) for p in found[:2])
            raise UserError(f"{name_or_path!r} is a run folder, not a model directory (no config.json): pass {hint}")
        raise UserError(f"{name_or_path!r} is not a model directory: it has no config.json (and no model inside it)")
    if local.exists():
        raise UserError(f"model {name_or_path!r} is a file but not a .gguf file: pass the directory that holds config.json, "
                        f"a .gguf file, or a built-in name ({', '.join(sources.BUILTINS)}; see `rlvr models list`)")
    if name_or_path == "tiny":  # `rlvr sft` builds it before a model is looked up; everything else starts from a model
        raise UserError("model 'tiny' (the embedded model) is built only by `rlvr sft`, from its `tiny.*` settings: train it "
                        "first (`rlvr sft sft_quickstart`) and pass its model folder (runs/quickstart/sft/final), or pass a model "
                        f"directory, a .gguf file or a built-in name ({', '.join(sources.BUILTINS)})")
    offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    if name_or_path.startswith((".", "/", "~")) or not _HUB_ID.match(name_or_path) or offline:
        why = " and the hub is offline (HF_HUB_OFFLINE=1)" if offline and _HUB_ID.match(name_or_path) else ""
        raise UserError(f"model {name_or_path!r} not found: no such directory ({local.resolve()}){why}; "
                        f"train one with `rlvr sft CONFIG`, or pass a model directory, a .gguf file or a built-in name "
                        f"({', '.join(sources.BUILTINS)})")
    from tasks.dataset import hub_reachable

    if not hub_reachable():
        raise UserError(f"model {name_or_path!r} not found: no such directory ({local.resolve()}), and the Hugging Face hub "
                        "cannot be reached to download it as a hub id")
    return name_or_path


def models_inside(folder: Path, depth: int = 3) -> list[Path]:
    """Model directories (holding config.json, or LoRA adapters) under ``folder``, best first: ``final``
    models, then checkpoints from the latest step (``step-N``) down."""
    found = {p.parent for d in range(1, depth + 1) for name in ("config.json", "adapter_config.json") for p in folder.glob("*/" * d + name)}

    def rank(path: Path) -> tuple[int, int, int]:
        step = re.search(r"(\d+)$", path.name)
        return (0 if path.name == "final" else 1, -(int(step.group(1)) if step else -1), len(path.parts))

    return sorted(found, key=rank)
