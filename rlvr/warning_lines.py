"""How rlvr prints a Python warning: one line, ``warning: MESSAGE``, as it prints an error
(``error: MESSAGE``), rather than Python's ``FILE:LINE: Category: MESSAGE`` and the source line.

`rlvr.cli.main` formats warnings so while a command runs and while it exits; a process of rlvr's own
that prints warnings (the asynchronous generation worker) installs it where it starts.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Iterator

OWN_PACKAGES = ("rlvr", "envs", "tasks", "sandboxes")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder rlvr's packages are in


def one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """A warning as rlvr prints it (`warnings.formatwarning`'s signature): its message on one line
    (lines joined); one raised in another library also names its category and where it came from,
    for a report to that library."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    path = os.path.abspath(filename) if os.path.isabs(filename) or os.path.exists(filename) else None
    if path and any(path.startswith(os.path.join(_ROOT, package) + os.sep) for package in OWN_PACKAGES):
        return f"warning: {text}\n"
    where = path.split(f"site-packages{os.sep}", 1)[-1] if path else filename  # (<frozen ...>, sys: as Python names them)
    return f"warning: {text} ({category.__name__}, {where}:{lineno})\n"


def install() -> None:
    """Print this process's warnings as `one_line_warning` from now on."""
    warnings.formatwarning = one_line_warning


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Print warnings as `one_line_warning` within the block; as before after it."""
    before, warnings.formatwarning = warnings.formatwarning, one_line_warning
    try:
        yield
    finally:
        warnings.formatwarning = before
