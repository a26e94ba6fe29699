"""A module imported on first use, so that what only describes or checks a config (the CLI's help,
its refusals of a bad config, ``rlvr algos list``) never pays for torch.

``torch = lazy_module("torch")`` binds a stand-in whose first attribute access imports the real
module; nothing is put in `sys.modules` until then, so ``"torch" in sys.modules`` stays a true
answer to "was torch imported?". Type checkers see the real module (import it under
``TYPE_CHECKING`` beside the stand-in)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``, importing it at the first attribute read."""

    __slots__ = ("_name", "_module")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}{' (imported)' if self._module is not None else ''}>"


def lazy_module(name: str) -> Any:
    """A stand-in for ``import name`` that imports on first use (typed Any: annotate with the real
    module under ``TYPE_CHECKING``)."""
    return LazyModule(name)
