"""rlvr's own wheel, built from the running code (``rlvr.hubs.harbor`` ships it in every task folder,
so a task's image installs its grader from the folder, never by name from a package index, where
``rlvr`` is not published and a package of that name would run as the grader).

The wheel holds the packages rlvr installs (``rlvr``, ``envs``, ``tasks``, ``sandboxes``) as they are
imported here (an editable checkout or an installed copy alike), with rlvr's metadata, its
entry points (the built-in environments and tasks register through them) and a RECORD of sha256
hashes: the standard layout pip installs offline (``pip install --no-index --no-deps FILE``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import zipfile
from pathlib import Path

PACKAGES = ("rlvr", "envs", "tasks", "sandboxes")
"""The top-level packages of rlvr's distribution (pyproject.toml's packages.find)."""

_SKIP = {"__pycache__"}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _files() -> list[tuple[str, Path]]:
    """(path in the wheel, file here) of every file of rlvr's packages, in a stable order."""
    out = []
    for name in PACKAGES:
        root = Path(next(iter(importlib.import_module(name).__path__)))
        for path in sorted(root.rglob("*")):
            if path.is_file() and not _SKIP & set(path.relative_to(root).parts) and path.suffix not in (".pyc", ".pyo"):
                out.append((f"{name}/{path.relative_to(root).as_posix()}", path))
    return out


def _metadata(version: str) -> str:
    try:
        requires = importlib.metadata.requires("rlvr") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    return "".join([f"Metadata-Version: 2.1\nName: rlvr\nVersion: {version}\nRequires-Python: >=3.10\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])


def _entry_points() -> str:
    try:
        text = importlib.metadata.distribution("rlvr").read_text("entry_points.txt")
    except importlib.metadata.PackageNotFoundError:
        text = None
    return text or ("[console_scripts]\nrlvr = rlvr.cli:main\n\n[rlvr.envs]\nbuiltin = envs.builtin:register_all\n\n"
                    "[rlvr.tasks]\nbuiltin = tasks.builtin:register_all\n")


def build_wheel(folder: Path) -> Path:
    """Write rlvr's wheel into ``folder``; its path."""
    try:
        version = importlib.metadata.version("rlvr")
    except importlib.metadata.PackageNotFoundError:
        version = "0.0.0"
    info = f"rlvr-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [(arc, path.read_bytes()) for arc, path in _files()]
    entries += [(f"{info}/METADATA", _metadata(version).encode()),
                (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: rlvr.hubs.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
                (f"{info}/entry_points.txt", _entry_points().encode())]
    record = "".join(f"{arc},{_digest(data)},{len(data)}\n" for arc, data in entries) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rlvr-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arc, data in [*entries, (f"{info}/RECORD", record.encode())]:
            stamp = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))  # the same code gives the same bytes
            stamp.compress_type = zipfile.ZIP_DEFLATED
            stamp.external_attr = 0o644 << 16
            wheel.writestr(stamp, data)
    return path
