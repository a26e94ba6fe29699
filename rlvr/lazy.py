"""Modules imported on first use, so that what only describes or checks a config (the CLI's help,
its refusals of a bad config, ``rlvr algos list``) never pays for torch.

``torch = lazy_module("torch")`` binds a stand-in whose first attribute access imports the real
module; nothing is put in `sys.modules` until then, so ``"torch" in sys.modules`` stays a true
answer to "was torch imported?". Type checkers see the real module (import it under
``TYPE_CHECKING`` beside the stand-in). A package that re-exports names of modules needing torch
gives them through `lazy_exports`."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable


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


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A package's module-level ``__getattr__`` (PEP 562) that imports each re-exported name from
    its module (``where``: name -> module) when it is first read."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__
