"""Verification off the caller's thread: inline, in threads, or in worker processes.

A trainer submits each batch of completions as soon as it is generated and collects the verdicts
later, so verification overlaps generation instead of serialising the loop. Every item gets a
verdict: an exception is an ``error`` verdict (see `safe_verify`), an item that does not finish
within ``timeout_s`` is a ``timeout`` verdict, and a pool whose worker hung is torn down and
rebuilt before the next batch (only a process pool can actually stop a hung verifier).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import pickle
import time
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from envs.base import Environment, safe_verify
from envs.types import Problem, Verdict

PoolKind = Literal["inline", "thread", "process"]

_worker_env: Environment | None = None
_worker_init_error: str | None = None


def _init_worker(env_bytes: bytes) -> None:
    # Unpickle here, not in the pool's own initargs handling: an environment whose class cannot
    # be imported in a fresh process would otherwise kill and respawn workers forever.
    global _worker_env, _worker_init_error
    try:
        _worker_env = pickle.loads(env_bytes)
    except Exception as e:
        _worker_init_error = f"worker could not load the environment: {type(e).__name__}: {e} (define it in an importable module)"


def _verify_in_worker(problem: Problem, completion: str) -> Verdict:
    if _worker_env is None:
        return Verdict.error(_worker_init_error or "worker was not initialised with an environment")
    return safe_verify(_worker_env, problem, completion)


@dataclass
class PoolStats:
    """Counters since the pool was created."""

    verified: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0


def batched(env: Environment) -> bool:
    """Whether ``env`` verifies a batch its own way (e.g. all sandbox jobs in flight together)."""
    return type(env).verify_many is not Environment.verify_many


def _verify_batch(env: Environment, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
    """``env.verify_many`` with containment: if the batch call raises, each item is verified alone
    (so one bad item cannot turn a whole batch into errors)."""
    try:
        verdicts = env.verify_many(problems, completions)
        if len(verdicts) != len(problems):
            raise ValueError(f"verify_many returned {len(verdicts)} verdicts for {len(problems)} items")
        return verdicts
    except Exception:
        return [safe_verify(env, p, c) for p, c in zip(problems, completions)]


class _Batch:
    """A handle for one ``verify_many`` call covering ``n`` items."""

    def __init__(self, handle: Any, n: int):
        self.handle, self.n = handle, n


class PendingVerdicts:
    """Verdicts being computed for one submitted batch; `result()` waits for them in order."""

    def __init__(self, pool: VerifierPool, handles: list[Any], submitted_at: float):
        self._pool = pool
        self._handles = handles
        self._submitted_at = submitted_at
        self._verdicts: list[Verdict] | None = None

    def result(self) -> list[Verdict]:
        if self._verdicts is None:
            self._verdicts = self._pool._collect(self._handles, self._submitted_at)
        return self._verdicts


class VerifierPool:
    """Run ``env.verify`` over batches, in parallel.

    Args:
        env: The environment (must be picklable for ``kind="process"``).
        workers: Number of workers; 0 means inline in the caller's thread.
        kind: ``"process"`` (isolates hangs and crashes; a hung worker is killed), ``"thread"``
            (cheap; for fast verifiers that release the GIL or do little work) or ``"inline"``.
        timeout_s: Per-item budget, counted from the moment the caller starts waiting for the
            item or the previous item arrived, whichever is later.
    """

    def __init__(self, env: Environment, workers: int = 0, kind: PoolKind = "process", timeout_s: float = 30.0):
        if workers < 0:
            raise ValueError(f"verify workers must be >= 0, got {workers}")
        self.env = env
        self.kind: PoolKind = "inline" if workers == 0 else kind
        self.workers = workers
        self.timeout_s = timeout_s
        self.stats = PoolStats()
        self._executor: Any = None
        self._broken = False

    # -- public -------------------------------------------------------------------------------

    def submit(self, problems: Sequence[Problem], completions: Sequence[str]) -> PendingVerdicts:
        """Start verifying a batch; returns at once (except inline, which verifies now)."""
        if len(problems) != len(completions):
            raise ValueError(f"submit: {len(problems)} problems but {len(completions)} completions")
        now = time.perf_counter()
        if self.kind == "inline":
            if batched(self.env):
                return PendingVerdicts(self, _verify_batch(self.env, problems, completions), now)
            return PendingVerdicts(self, [safe_verify(self.env, p, c) for p, c in zip(problems, completions)], now)
        self._ensure_executor()
        if self.kind == "thread" and batched(self.env):
            handles = [_Batch(self._executor.submit(_verify_batch, self.env, problems, completions), len(problems))]
        elif self.kind == "thread":
            handles = [self._executor.submit(safe_verify, self.env, p, c) for p, c in zip(problems, completions)]
        else:
            handles = [self._executor.apply_async(_verify_in_worker, (p, c)) for p, c in zip(problems, completions)]
        return PendingVerdicts(self, handles, now)

    def verify(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Verify a batch and wait for it."""
        return self.submit(problems, completions).result()

    def close(self) -> None:
        if self._executor is None:
            return
        if self.kind == "thread":
            self._executor.shutdown(wait=False, cancel_futures=True)
        else:
            self._executor.terminate()
            self._executor.join()
        self._executor = None

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- internals ----------------------------------------------------------------------------

    def _ensure_executor(self) -> None:
        if self._broken:
            self.close()
            self._broken = False
            self.stats.restarts += 1
        if self._executor is not None:
            return
        if self.kind == "thread":
            self._executor = cf.ThreadPoolExecutor(self.workers, thread_name_prefix="verify")
        else:
            # spawn, not fork: the parent usually holds torch and its thread pools
            ctx = mp.get_context("spawn")
            self._executor = ctx.Pool(self.workers, initializer=_init_worker, initargs=(pickle.dumps(self.env),))

    def _collect(self, handles: list[Any], submitted_at: float) -> list[Verdict]:
        verdicts: list[Verdict] = []
        last = submitted_at
        for handle in handles:
            if isinstance(handle, Verdict):  # inline
                verdicts.append(handle)
                continue
            if isinstance(handle, _Batch):  # the batch gets the budget of its items verified in turn
                budget = self.timeout_s * max(1.0, handle.n / max(self.workers, 1))
                try:
                    verdicts += handle.handle.result(max(0.0, max(last, time.perf_counter()) + budget - time.perf_counter()))
                except cf.TimeoutError:
                    verdicts += [Verdict.timeout(budget, where="batched thread pool")] * handle.n
                last = time.perf_counter()
                continue
            wait = max(0.0, max(last, time.perf_counter()) + self.timeout_s - time.perf_counter())
            try:
                verdict = handle.result(wait) if self.kind == "thread" else handle.get(wait)
            except (cf.TimeoutError, mp.TimeoutError):
                verdict = Verdict.timeout(self.timeout_s, where=f"{self.kind} pool")
                self._broken = self._broken or self.kind == "process"
            except Exception as e:  # the worker itself died (e.g. killed by the OOM killer)
                verdict = Verdict.error(f"verifier worker failed: {type(e).__name__}: {e}")
                self._broken = self._broken or self.kind == "process"
            last = time.perf_counter()
            verdicts.append(verdict)
        for v in verdicts:
            self.stats.verified += 1
            self.stats.errors += v.status.value == "error"
            self.stats.timeouts += v.status.value == "timeout"
        return verdicts
