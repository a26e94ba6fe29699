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


def build_wheel(folder: Path, extra: dict[str, bytes] | None = None) -> Path:
    """Write rlvr's wheel into ``folder`` (with ``extra``: {path in the wheel: content} beside rlvr's
    own files); its path."""
    try:
        version = importlib.metadata.version("rlvr")
    except importlib.metadata.PackageNotFoundError:
        version = "0.0.0"
    info = f"rlvr-{version}.dist-info"
    entries: list[tuple[str, bytes]] = [(arc, path.read_bytes()) for arc, path in _files()] + sorted((extra or {}).items())
    entries += [(f"{info}/METADATA", _metadata(version).encode()),
                (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: rlvr.hubs.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
                (f"{info}/entry_points.txt", _entry_points().encode())]
    return _write(folder / f"rlvr-{version}-py3-none-any.whl", info, entries)


def installed_wheel(distribution: str, folder: Path) -> Path | None:
    """A wheel of ``distribution`` as installed here (its package files and metadata, under the tag
    its own WHEEL file names), written into ``folder``; None when it is not installed. For the few
    packages a grader imports beyond the standard library, so a task's image needs no index for them."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    wheel_text = dist.read_text("WHEEL") or ""
    tag = next((line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")), "py3-none-any")
    name = dist.metadata["Name"].replace("-", "_")
    info = f"{name}-{dist.version}.dist-info"
    skip = {f"{info}/{n}" for n in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")}
    entries, executable = [], set()
    for file in dist.files or []:
        arc = file.as_posix()
        if arc.startswith("..") or arc in skip or "__pycache__" in file.parts or arc.endswith((".pyc", ".pyo")):
            continue  # (scripts outside site-packages: pip writes console scripts from entry_points.txt again)
        path = Path(dist.locate_file(file))
        if path.is_file():
            entries.append((arc, path.read_bytes()))
            if path.stat().st_mode & 0o111:
                executable.add(arc)
    return _write(folder / f"{name}-{dist.version}-{tag}.whl", info, entries, executable)


def _write(path: Path, info: str, entries: list[tuple[str, bytes]], executable: frozenset[str] | set[str] = frozenset()) -> Path:
    """The wheel at ``path``: ``entries`` and a RECORD of their hashes, in a stable order and with fixed
    timestamps (the same files give the same bytes)."""
    record = "".join(f"{arc},{_digest(data)},{len(data)}\n" for arc, data in entries) + f"{info}/RECORD,,\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for arc, data in [*entries, (f"{info}/RECORD", record.encode())]:
            stamp = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            stamp.compress_type = zipfile.ZIP_DEFLATED
            stamp.external_attr = (0o755 if arc in executable else 0o644) << 16
            wheel.writestr(stamp, data)
    return path
