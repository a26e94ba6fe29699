"""The typed values at the sandbox boundary: `Limits`, `Job`, `Execution`, `ExecStatus`, errors.

Everything here is plain data (picklable, JSON-serialisable through ``to_dict``) so it can cross
processes and the HTTP backend unchanged.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Mapping


class SandboxError(RuntimeError):
    """A sandbox could not be used (misconfiguration, missing component); the message says what to do."""


class BackendUnavailable(SandboxError):
    """A backend cannot run on this machine; ``reason`` says why and how to fix it."""

    def __init__(self, backend: str, reason: str):
        super().__init__(f"sandbox backend {backend!r} is unavailable: {reason}")
        self.backend = backend
        self.reason = reason


class ExecStatus(str, enum.Enum):
    """How an execution ended.

    ``OK`` means the program ran to its end within every limit (its exit code may still be
    non-zero). ``ERROR`` is a failure of the sandbox itself (crashed worker, unreachable backend):
    it says nothing about the program and must never be scored as a wrong answer silently.
    """

    OK = "ok"
    TIMEOUT = "timeout"  # wall-clock or CPU-time limit
    MEMORY = "memory"  # memory limit (OOM kill or MemoryError under the address-space limit)
    OUTPUT_LIMIT = "output_limit"  # stdout + stderr exceeded Limits.output_bytes
    KILLED = "killed"  # died from a signal that no limit of ours sent (e.g. SIGSEGV)
    ERROR = "error"  # infrastructure failure

    @property
    def is_infrastructure_failure(self) -> bool:
        return self is ExecStatus.ERROR


_DAY_S = 86400
LIMIT_MAXIMA: dict[str, float] = {
    "wall_s": _DAY_S, "cpu_s": _DAY_S, "memory_mb": 1 << 20, "output_bytes": 1 << 34, "processes": 1 << 22,
    "file_size_mb": 1 << 20, "disk_mb": 1 << 20, "inodes": 1 << 32, "open_files": 1 << 20,
}
"""The largest value each limit takes (a day of wall or CPU time, a TiB of memory, disk or file):
past these a limit is a mistake, and one like ``wall_s=1e308`` overflows the watchdog's timers."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one job. Every field has a unit in its name.

    Attributes:
        wall_s: Wall-clock seconds from start to kill (host-side watchdog).
        cpu_s: CPU seconds (user + system) across the job's processes; RLIMIT_CPU per process.
        memory_mb: Memory in MiB: the job's cgroup limit where cgroups are available, and the
            address-space rlimit (beyond the interpreter's own mappings) everywhere.
        output_bytes: Total stdout + stderr bytes kept; past it the job is killed.
        processes: Maximum processes/threads alive at once (the job cgroup's pids.max; RLIMIT_NPROC,
            which counts the whole uid's, only where there is no cgroup).
        file_size_mb: Largest single file the job may write (RLIMIT_FSIZE).
        disk_mb: Size of the job's private scratch filesystem (its working directory, ``/tmp``).
        inodes: Number of files and directories the scratch filesystem can hold.
        open_files: Maximum open file descriptors (RLIMIT_NOFILE).
    """

    wall_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 1 << 20
    processes: int = 64
    file_size_mb: int = 16
    disk_mb: int = 64
    inodes: int = 4096
    open_files: int = 256

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise SandboxError(f"Limits.{f.name} must be a finite positive number, got {value!r}")
            if value > LIMIT_MAXIMA[f.name]:
                raise SandboxError(f"Limits.{f.name} must be at most {LIMIT_MAXIMA[f.name]:g}, got {value!r}")

    def replace(self, **changes: Any) -> Limits:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Limits:
        data = dict(data or {})
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise SandboxError(f"unknown limit(s) {sorted(unknown)}; known: {[f.name for f in fields(cls)]}")
        return cls(**data)


@dataclass(frozen=True)
class Job:
    """One program to run.

    Attributes:
        code: Python source, run as ``main.py`` in the job's scratch directory.
        stdin: Bytes fed to the program's standard input (str is UTF-8 encoded).
        files: Extra files written to the scratch directory first: ``{relative path: content}``.
        limits: Resource limits.
    """

    code: str
    stdin: bytes = b""
    files: Mapping[str, bytes] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def make(cls, code: str, *, stdin: bytes | str | None = None, files: Mapping[str, bytes | str] | None = None,
             limits: Limits | Mapping[str, Any] | None = None) -> Job:
        """Build a job, normalising text to UTF-8 and checking file names."""
        if not isinstance(code, str):
            raise SandboxError(f"code must be a str of Python source, got {type(code).__name__}")
        raw_stdin = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        norm: dict[str, bytes] = {}
        for name, content in (files or {}).items():
            parts = name.split("/")
            if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or name == "main.py":
                raise SandboxError(f"files: {name!r} is not allowed: use a relative path without '..' (and not main.py)")
            norm[name] = content.encode() if isinstance(content, str) else bytes(content)
        lim = limits if isinstance(limits, Limits) else Limits.from_dict(limits)
        return cls(code=code, stdin=raw_stdin, files=norm, limits=lim)


@dataclass(frozen=True)
class Execution:
    """What running a job produced.

    Attributes:
        status: How it ended; see `ExecStatus`.
        exit_code: The program's exit status; negative for death by signal (``-9`` = SIGKILL),
            None when it never ran (``ERROR``).
        stdout: Standard output, at most ``Limits.output_bytes`` bytes.
        stderr: Standard error, within the same budget.
        wall_s: Wall-clock seconds the job took.
        cpu_s: CPU seconds (user + system) used by the job's processes.
        peak_memory_bytes: Peak memory: the job cgroup's high-water mark where available, else the
            largest resident set of its processes (which counts interpreter pages shared with a
            warm worker). None when unknown.
        backend: The backend that ran it.
        info: Details for people: the error message for ``ERROR``, the signal name, truncation.
    """

    status: ExecStatus
    exit_code: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_bytes: int | None = None
    backend: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Ran to completion within limits and exited 0."""
        return self.status is ExecStatus.OK and self.exit_code == 0

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @classmethod
    def error(cls, message: str, *, backend: str = "", **info: Any) -> Execution:
        return cls(status=ExecStatus.ERROR, exit_code=None, backend=backend, info={"error": message, **info})

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value, "exit_code": self.exit_code,
            "stdout": self.stdout.decode("utf-8", "replace"), "stderr": self.stderr.decode("utf-8", "replace"),
            "wall_s": self.wall_s, "cpu_s": self.cpu_s, "peak_memory_bytes": self.peak_memory_bytes,
            "backend": self.backend, "info": self.info,
        }
