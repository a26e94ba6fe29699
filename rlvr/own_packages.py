"""rlvr's own top-level packages besides `rlvr`: ``envs``, ``tasks`` and ``sandboxes``.

Their short names can be hidden by a reader's own module: a ``tasks.py`` in the folder a script or
``python -m rlvr.cli`` runs from (Python puts that folder first on ``sys.path``), or on
``PYTHONPATH``. rlvr would then import the reader's file as its task package and fail somewhere
far from the cause. `shadowed` finds that before anything is imported (``importlib.util.find_spec``
locates a module without running it); the CLI refuses to start with one line per hidden package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

NAMES = ("envs", "tasks", "sandboxes")
"""The top-level packages that ship in rlvr's distribution beside ``rlvr`` (pyproject.toml)."""


def _origin(name: str) -> str | None:
    """The file ``import name`` runs (or ran), without importing it; None if there is none."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__file__", None)
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def shadowed(names: tuple[str, ...] = NAMES) -> list[str]:
    """One line for each of ``names`` that would not be imported from rlvr's own folder (the one that
    holds ``rlvr/``), naming the file that hides it and what to do."""
    root = Path(__file__).resolve().parent.parent
    problems = []
    for name in names:
        expected = root / name / "__init__.py"
        origin = _origin(name)
        if origin is None:
            problems.append(f"rlvr's package `{name}` cannot be found (expected {expected}): reinstall rlvr")
        elif Path(origin).resolve() != expected.resolve():
            problems.append(f"{origin} hides rlvr's own `{name}` package ({expected.parent}): rename your module "
                            f"(or keep it inside a package of yours) or run from another folder")
    return problems
