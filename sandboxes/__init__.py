"""Run untrusted code: backends, limits, pools.

    import sandboxes
    ex = sandboxes.run("print(input()[::-1])", stdin="abc", limits=sandboxes.Limits(wall_s=2))
    ex.status, ex.exit_code, ex.stdout      # ExecStatus.OK, 0, b"cba\\n"

    with sandboxes.SandboxPool() as pool:  # concurrency: one warm worker per core
        results = pool.map([sandboxes.Job.make(code) for code in programs])

Backends (`sandboxes.BACKENDS`, `rlvr sandbox info` says which run here and why not):
``local`` (warm bubblewrap workers, a fork per job), ``process`` (a bubblewrap sandbox per job),
``docker`` (warm containers through the Docker SDK), ``remote`` (a SandboxFusion-compatible HTTP
service, e.g. `rlvr sandbox serve` on another machine) and ``unsafe`` (no isolation; an
explicit, loud opt-in, never chosen automatically). The default is the best available backend,
or the one named by ``$RLVR_SANDBOX``.

This package imports nothing from ``envs``, ``tasks`` or ``rlvr``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import threading
from typing import Any, Iterable, Mapping

from sandboxes.backend import (
    BACKENDS, Availability, Backend, BackendSpec, availability_report, backend_spec, best_available, make_backend,
    register_backend,
)
from sandboxes.types import BackendUnavailable, Execution, ExecStatus, Job, Limits, SandboxError

register_backend("local", "sandboxes.local:LocalBackend", priority=0,
                 description="warm bubblewrap workers (one per core), a fork per job: namespaces, cgroup, uid, rlimits, seccomp")
register_backend("process", "sandboxes.process:ProcessBackend", priority=10,
                 description="one bubblewrap sandbox and interpreter per job (same isolation, slower)")
register_backend("docker", "sandboxes.docker:DockerBackend", priority=20,
                 description="warm Docker containers (no network, read-only root, no capabilities), exec per job")
register_backend("remote", "sandboxes.remote:RemoteBackend", priority=None,
                 description="a SandboxFusion-compatible run_code HTTP service (needs url=...)")
register_backend("unsafe", "sandboxes.unsafe:UnsafeBackend", priority=None,
                 description="NO ISOLATION: plain subprocess; explicit opt-in only")

BACKEND_ENV = "RLVR_SANDBOX"
"""Environment variable naming the default backend (e.g. ``process``); unset means the best available."""

_default: tuple[int, Backend] | None = None
_default_lock = threading.Lock()


def default_backend() -> Backend:
    """The process-wide backend used by `run` (built on first use; a forked child builds its own)."""
    global _default
    with _default_lock:
        if _default is None or _default[0] != os.getpid():
            _default = (os.getpid(), make_backend(os.environ.get(BACKEND_ENV, "auto")))
        return _default[1]


def _job(code: str, stdin: bytes | str | None, files: Mapping[str, bytes | str] | None, limits: Limits | Mapping[str, Any] | None) -> Job:
    return Job.make(code, stdin=stdin, files=files, limits=limits)


def run(code: str, *, stdin: bytes | str | None = None, files: Mapping[str, bytes | str] | None = None,
        limits: Limits | Mapping[str, Any] | None = None, backend: Backend | None = None) -> Execution:
    """Run Python ``code`` in a sandbox and wait for it. Never raises for the program's behaviour:
    limits, crashes and sandbox failures are all reported in the returned `Execution`."""
    job = _job(code, stdin, files, limits)
    return (backend or default_backend()).run(job)


async def run_async(code: str, *, stdin: bytes | str | None = None, files: Mapping[str, bytes | str] | None = None,
                    limits: Limits | Mapping[str, Any] | None = None, backend: Backend | None = None) -> Execution:
    """`run` for asyncio code: the event loop keeps running while the job does."""
    job = _job(code, stdin, files, limits)
    return await (backend or default_backend()).run_async(job)


class SandboxPool:
    """Concurrent execution over one backend: ``submit`` returns a future, ``map`` keeps order.

    Args:
        backend: A `Backend`, or a registered name (``"auto"`` by default).
        workers: Jobs in flight at once (default: the backend's concurrency).
        **options: Passed to the backend when it is built here.
    """

    def __init__(self, backend: Backend | str = "auto", workers: int | None = None, **options: Any):
        self._owned = not isinstance(backend, Backend)
        self.backend = make_backend(backend, **options) if isinstance(backend, str) else backend
        self.workers = workers or self.backend.concurrency
        self._executor = cf.ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox-pool")

    def submit(self, job: Job) -> cf.Future[Execution]:
        return self._executor.submit(self.backend.run, job)

    def map(self, jobs: Iterable[Job]) -> list[Execution]:
        return list(self._executor.map(self.backend.run, jobs))

    async def run(self, job: Job) -> Execution:
        return await asyncio.wrap_future(self.submit(job))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self._owned:
            self.backend.close()

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "BACKENDS", "BACKEND_ENV", "Availability", "Backend", "BackendSpec", "BackendUnavailable", "ExecStatus", "Execution",
    "Job", "Limits", "SandboxError", "SandboxPool", "availability_report", "backend_spec", "best_available",
    "default_backend", "make_backend", "register_backend", "run", "run_async",
]
