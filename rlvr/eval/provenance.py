"""What an evaluation report records about where its number came from: when (UTC), which weights
(a hash of the weight files), which code (rlvr version and git commit; the package and version
that supplied the task and the environment, a plugin's own), which libraries, and absolute paths —
enough to tell two reports of "the same" model apart."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import rlvr

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
"""Files whose bytes are the model's weights."""

LIBRARIES = ("torch", "transformers", "datasets", "tokenizers", "accelerate", "sympy")
"""Libraries whose version changes what an evaluation measures."""


def utc_now() -> str:
    """The current time in ISO 8601, UTC, to the second (``2025-01-31T12:00:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def weights_sha256(model_dir: str | Path, chunk: int = 1 << 20) -> str | None:
    """sha256 over the model's weight files (name and bytes, in name order); None if the
    directory holds none."""
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        return None
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            while block := f.read(chunk):
                h.update(block)
    return "sha256:" + h.hexdigest()


def model_provenance(name_or_path: str, model: Any = None) -> dict[str, Any]:
    """``{"name", "path", "weights_sha256"}`` for a local directory; for a hub id, the hub
    revision the weights were loaded from (when transformers recorded it). A directory converted
    from a GGUF file, a ``.gguf`` path or a built-in name (`rlvr.models.sources`) adds ``source``:
    the original file, its ``sha256`` and the package that shipped it."""
    from rlvr.models import sources

    local = Path(name_or_path).expanduser()
    if not local.is_dir() and sources.is_source(name_or_path):
        local = sources.cached_folder(name_or_path) or local
    if local.is_dir():
        out = {"name": name_or_path, "path": str(local.resolve()), "weights_sha256": weights_sha256(local)}
        record = sources.source_record(local)
        if record is not None:
            out["source"] = {k: record.get(k) for k in ("source", "sha256", "format", "builtin") if record.get(k) is not None}
        return out
    revision = getattr(getattr(model, "config", None), "_commit_hash", None)
    return {"name": name_or_path, "path": None, "hub_revision": revision}


def project_commit() -> dict[str, Any]:
    """The git commit of the checkout rlvr runs from, and whether it had uncommitted changes
    (``{"commit": None}`` outside a git checkout or without git)."""
    root = Path(rlvr.__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def library_versions() -> dict[str, str | None]:
    """Versions of Python, rlvr and the libraries in `LIBRARIES` (None when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version(), "rlvr": rlvr.__version__}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@functools.lru_cache(maxsize=1)
def _distributions_by_top_level() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()  # scans every installed distribution: once


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_distribution(module: str) -> dict[str, str | None]:
    """``{"package", "version"}`` of the installed distribution that owns ``module`` (both None for
    code no distribution installed, e.g. a script's own class)."""
    owners = _distributions_by_top_level().get(module.partition(".")[0], [])
    return {"package": owners[0], "version": _version(owners[0])} if owners else {"package": None, "version": None}


def component_provenance(component: Any, registered_by: str | None = None) -> dict[str, Any]:
    """Where an environment's or a task's code came from: ``{"id", "class", "package", "version"}``
    for the distribution that owns the module defining its class (a plugin's, not rlvr's), and
    ``registered_by`` (package and version) when another distribution registered it (``registered_by``:
    the registry's `Spec.source`, an entry point's distribution)."""
    cls = type(component)
    out: dict[str, Any] = {"id": getattr(component, "id", "") or None, "class": f"{cls.__module__}.{cls.__qualname__}",
                           **module_distribution(cls.__module__)}
    if registered_by and registered_by != out["package"] and _version(registered_by) is not None:
        out["registered_by"] = {"package": registered_by, "version": _version(registered_by)}
    return out


SECRET_KEYS = ("token", "authorization", "password", "secret", "api_key", "apikey")
"""Keys whose values a report never records (a hub task's bearer token, an Authorization header)."""


def redact(value: Any) -> Any:
    """``value`` with every mapping entry whose key names a secret (`SECRET_KEYS`) replaced by "***"."""
    if isinstance(value, dict):
        return {k: ("***" if isinstance(k, str) and any(s in k.lower() for s in SECRET_KEYS) and v else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value
