"""An environment behind a bounded verifier pool, counting the verdicts that carry no reward.

Both framework adapters verify through this: every completion gets a verdict within the pool's
per-item bound (a process pool kills a verifier that hangs), and errors and timeouts are counted
and warned about, so the adapter can report them in its framework's own way.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Sequence

from envs.base import Environment
from envs.pool import PoolKind, VerifierPool
from envs.types import Problem, Status, Verdict


@dataclass
class ScoreCounts:
    """Verdicts since the scorer was created, by outcome."""

    verified: int = 0
    passed: int = 0
    errors: int = 0
    timeouts: int = 0

    @property
    def failures(self) -> int:
        """Verdicts that say nothing about the completion (verifier error or timeout)."""
        return self.errors + self.timeouts


@dataclass(frozen=True)
class ScorerSettings:
    """How verification runs: ``workers`` in a ``kind`` pool, each item bounded by ``timeout_s``.

    ``kind="process"`` (the default) is the one that can stop a verifier that never returns.
    """

    workers: int = 2
    kind: PoolKind = "process"
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1 (verification runs in a pool), got {self.workers}")
        if self.kind not in ("process", "thread"):
            raise ValueError(f"kind must be 'process' or 'thread', got {self.kind!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


class PooledScorer:
    """Verifies batches with ``env`` in a `VerifierPool` and counts the outcomes (see the module docstring)."""

    def __init__(self, env: Environment, settings: ScorerSettings = ScorerSettings()):
        self.env = env
        self.settings = settings
        self.counts = ScoreCounts()
        self._pool: VerifierPool | None = None
        self._lock = threading.Lock()  # frameworks may call from several threads (verl's reward loop)

    @property
    def name(self) -> str:
        return env_name(self.env)

    def verify(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """One verdict per completion; a batch with errors or timeouts warns once, with the first reason."""
        with self._lock:
            if self._pool is None:
                s = self.settings
                self._pool = VerifierPool(self.env, workers=s.workers, kind=s.kind, timeout_s=s.timeout_s)
            verdicts = self._pool.verify(problems, completions)
            self._count(verdicts)
        return verdicts

    def _count(self, verdicts: list[Verdict]) -> None:
        errors = [v for v in verdicts if v.status == Status.ERROR]
        timeouts = [v for v in verdicts if v.status == Status.TIMEOUT]
        self.counts.verified += len(verdicts)
        self.counts.passed += sum(v.passed for v in verdicts)
        self.counts.errors += len(errors)
        self.counts.timeouts += len(timeouts)
        if errors or timeouts:
            first = (errors or timeouts)[0].info
            reason = first.get("error") or f"no verdict within {first.get('timeout_s')} s"
            warnings.warn(
                f"{self.name}: {len(errors)} verifier error(s) and {len(timeouts)} timeout(s) in a batch of {len(verdicts)} "
                f"({self.counts.failures} of {self.counts.verified} so far); first: {reason}",
                RuntimeWarning, stacklevel=4,
            )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    # pickled into another process (some trainers do): the pool stays behind and is rebuilt there
    def __getstate__(self) -> dict:
        return {**self.__dict__, "_pool": None, "_lock": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def env_name(env: Environment) -> str:
    return env.id or type(env).__name__
