"""Verification off the caller's thread, every item bounded: in threads or in worker processes.

A trainer submits each batch of completions as soon as it is generated and collects the verdicts
later, so verification overlaps generation instead of serialising the loop. Every item gets a
verdict, and none can hang its caller or the process:

- an exception, or a verdict that is not well formed, is an ``error`` verdict (`safe_verify`);
- an item still running ``timeout_s`` after a worker *started* it is a ``timeout`` verdict. The
  budget counts from the start of the item, not from when it was queued, so one hang costs one
  budget, not one per item queued behind it;
- the worker that hung is replaced at once. A process is killed and respawned. A thread cannot be
  stopped: it is abandoned (a daemon thread, so it never keeps the interpreter alive at exit) and a
  fresh one takes its place. While ``max_stuck`` abandoned threads are still running, items get an
  ``error`` verdict at once instead of yet another thread: use ``kind="process"`` for a verifier
  that can hang.

Each worker is a slot: a small supervisor thread in the caller's process that takes jobs from the
pool's queue, hands each to its runner (a thread, or a child process over a pipe) and waits at
most the job's budget. ``inline`` is one such slot whose caller waits at `submit`.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import pickle
import queue
import signal
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from envs import faults
from envs.base import Environment, safe_verify
from envs.threads import DaemonExecutor
from envs.types import Problem, Verdict
from envs.verdicts import validate_verdict

PoolKind = Literal["inline", "thread", "process"]
KINDS: tuple[str, ...] = ("inline", "thread", "process")

PROCESS_START_TIMEOUT_S = 120.0
"""How long a worker process may take to start and load the environment (not part of any item's budget)."""


@dataclass
class PoolStats:
    """Counters since the pool was created.

    Attributes:
        verified: Items collected.
        errors / timeouts: Items whose verdict is ``error`` / ``timeout``.
        restarts: Workers replaced (a process killed after a hang or a crash, or a thread abandoned).
        abandoned: Threads abandoned in a verify call that did not return within its budget.
    """

    verified: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0
    abandoned: int = 0


def batched(env: Environment) -> bool:
    """Whether ``env`` verifies a batch its own way (e.g. all sandbox jobs in flight together)."""
    return type(env).verify_many is not Environment.verify_many


def _verify_batch(env: Environment, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
    """``env.verify_many`` with containment: if the batch call raises or returns the wrong number of
    verdicts, each item is verified alone (so one bad item cannot turn a whole batch into errors);
    every verdict is validated like `safe_verify`'s."""
    try:
        verdicts = env.verify_many(problems, completions)
        if len(verdicts) != len(problems):
            raise ValueError(f"verify_many returned {len(verdicts)} verdicts for {len(problems)} items")
    except Exception:
        return [safe_verify(env, p, c) for p, c in zip(problems, completions)]
    return [validate_verdict(v, f"{type(env).__name__}.verify_many") for v in verdicts]


def _verify_payload(env: Environment, problems: Sequence[Problem], completions: Sequence[str], as_batch: bool) -> list[Verdict]:
    faults.reached("verify")
    if as_batch:
        return _verify_batch(env, problems, completions)
    return [safe_verify(env, p, c) for p, c in zip(problems, completions)]


class _WorkerFailed(Exception):
    """A runner could not run a job (its process died or never started, or no thread may start)."""


# -- runners: where a job actually runs -----------------------------------------------------------


class _ThreadRunner:
    """A daemon thread (a `DaemonExecutor` of one) that runs the jobs handed to it one at a time."""

    def __init__(self, env: Environment, name: str):
        self.env = env
        self._executor = DaemonExecutor(1, name)

    @property
    def alive(self) -> bool:
        return self._executor.alive

    def run(self, payload: tuple, budget_s: float) -> list[Verdict] | None:
        """The job's verdicts, or None if it is still running after ``budget_s`` (the thread is
        then abandoned: it exits if the call ever returns)."""
        future = self._executor.submit(_verify_in_thread, self.env, payload)
        try:
            return future.result(budget_s)
        except cf.TimeoutError:
            self._executor.shutdown()
            return None

    def close(self) -> None:
        self._executor.shutdown(wait_s=1.0)  # an idle thread exits at once; a stuck one is abandoned after 1 s


def _verify_in_thread(env: Environment, payload: tuple) -> list[Verdict]:
    try:
        return _verify_payload(env, *payload)
    except BaseException as e:  # noqa: BLE001 - e.g. SystemExit from a verifier; the caller gets a verdict
        return [Verdict.error(f"verifier thread failed: {type(e).__name__}: {e}")] * len(payload[0])


def _process_main(conn: Any, env_bytes: bytes | None, load_error: str | None) -> None:
    """A worker process: load the environment, then answer jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and a terminal's hangup are the parent's to handle
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    env: Environment | None = None
    if env_bytes is not None:
        try:
            env = pickle.loads(env_bytes)
        except Exception as e:
            load_error = f"worker could not load the environment: {type(e).__name__}: {e} (define it in an importable module)"
    conn.send("ready")
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        if payload is None:
            return
        n = len(payload[0])
        verdicts = [Verdict.error(load_error or "no environment")] * n if env is None else _verify_payload(env, *payload)
        try:
            conn.send(verdicts)
        except Exception as e:  # a verdict whose info cannot be pickled
            conn.send([Verdict.error(f"could not send the verdict back from the worker: {type(e).__name__}: {e}")] * n)


class _ProcessRunner:
    """A spawned child process spoken to over a pipe; killed when a job overruns its budget."""

    def __init__(self, env_bytes: bytes | None, load_error: str | None, name: str):
        ctx = mp.get_context("spawn")  # not fork: the parent usually holds torch and its thread pools
        self._conn, child = ctx.Pipe()
        # daemon: multiprocessing terminates it at exit even if close() was never called
        self.proc = ctx.Process(target=_process_main, args=(child, env_bytes, load_error), name=name, daemon=True)
        self.proc.start()
        child.close()
        try:
            if not self._conn.poll(PROCESS_START_TIMEOUT_S) or self._conn.recv() != "ready":
                raise _WorkerFailed(f"verifier worker process did not start within {PROCESS_START_TIMEOUT_S:.0f} s")
        except (EOFError, OSError) as e:
            self.close()
            raise _WorkerFailed(f"verifier worker process died while starting (exit code {self.proc.exitcode})") from e
        except _WorkerFailed:
            self.close()
            raise

    def run(self, payload: tuple, budget_s: float) -> list[Verdict] | None:
        try:
            self._conn.send(payload)
            if not self._conn.poll(budget_s):
                return None
            return self._conn.recv()
        except (EOFError, OSError) as e:
            self.proc.join(1.0)
            raise _WorkerFailed(f"verifier worker process died ({_how_it_ended(self.proc.exitcode)})") from e

    def kill(self) -> None:
        """Kill the process (from any thread); a slot waiting on the pipe then sees it close."""
        if self.proc.is_alive():
            self.proc.kill()

    def close(self) -> None:
        self.kill()
        self.proc.join(5.0)
        self._conn.close()


def _how_it_ended(exitcode: int | None) -> str:
    """``exit code 3``, or ``killed by SIGSEGV`` (multiprocessing reports a signal as minus its number)."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    return f"exit code {exitcode}"


# -- jobs and slots -------------------------------------------------------------------------------


@dataclass
class _Job:
    """One unit of work: a single item, or a whole batch for an environment that batches."""

    problems: Sequence[Problem]
    completions: Sequence[str]
    as_batch: bool
    budget_s: float
    verdicts: list[Verdict] | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def finish(self, verdicts: list[Verdict]) -> None:
        if not self.done.is_set():
            self.verdicts = verdicts
            self.done.set()


class _Slot:
    """A supervisor thread: takes jobs from the pool's queue and runs each on its own runner within
    the job's budget, replacing the runner after a hang or a crash."""

    def __init__(self, pool: VerifierPool, index: int):
        self.pool = pool
        self.index = index
        self.runner: Any = None
        self.thread = threading.Thread(target=self._loop, name=f"verify-slot-{index}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        pool = self.pool
        while True:
            job = pool._queue.get()
            if job is None or pool._closed:
                if job is not None:
                    job.finish([Verdict.error("verifier pool closed")] * len(job.problems))
                break
            try:
                job.finish(self._run(job))
            except BaseException as e:  # noqa: BLE001 - a supervisor must never leave a job unfinished
                job.finish([Verdict.error(f"verifier pool failed: {type(e).__name__}: {e}")] * len(job.problems))
        if self.runner is not None:
            self.runner.close()

    def _run(self, job: _Job) -> list[Verdict]:
        n = len(job.problems)
        try:
            if self.runner is None:
                self.runner = self.pool._new_runner(self.index)
            verdicts = self.runner.run((job.problems, job.completions, job.as_batch), job.budget_s)
        except _WorkerFailed as e:
            self._retire()
            return [Verdict.error(str(e))] * n
        if verdicts is None:
            self._retire(hung=True)
            return [Verdict.timeout(job.budget_s, where=f"{self.pool.kind} pool")] * n
        return verdicts

    def _retire(self, hung: bool = False) -> None:
        if self.runner is not None:
            self.pool._retire(self.runner, hung)
            self.runner = None


# -- the pool -------------------------------------------------------------------------------------


class PendingVerdicts:
    """Verdicts being computed for one submitted batch; `result()` waits for them in order."""

    def __init__(self, pool: VerifierPool, jobs: list[_Job]):
        self._pool = pool
        self._jobs = jobs
        self._verdicts: list[Verdict] | None = None

    def result(self) -> list[Verdict]:
        if self._verdicts is None:
            self._verdicts = self._pool._collect(self._jobs)
        return self._verdicts


class VerifierPool:
    """Run ``env.verify`` over batches, each item within ``timeout_s``.

    Args:
        env: The environment (must be picklable for ``kind="process"``).
        workers: Number of workers; 0 means ``kind="inline"``.
        kind: ``"process"`` (a hung or crashed worker is killed and replaced; the environment must
            be importable in a fresh process), ``"thread"`` (cheap; a hung thread is abandoned and
            replaced) or ``"inline"`` (one thread; `submit` returns when the batch is verified).
        timeout_s: Budget of one item, counted from the moment a worker starts it. An environment
            that verifies whole batches (`batched`) gets ``timeout_s`` per item over its workers.
        max_stuck: Abandoned threads still running past which items fail at once with an
            ``error`` verdict that names the cause (thread and inline kinds).
    """

    def __init__(self, env: Environment, workers: int = 0, kind: PoolKind = "process", timeout_s: float = 30.0,
                 max_stuck: int = 8):
        if workers < 0:
            raise ValueError(f"verify workers must be >= 0, got {workers}")
        if kind not in KINDS:
            raise ValueError(f"verify kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if not timeout_s > 0:
            raise ValueError(f"verify timeout must be > 0 seconds, got {timeout_s}")
        self.env = env
        self.kind: PoolKind = "inline" if workers == 0 or kind == "inline" else kind
        self.workers = 1 if self.kind == "inline" else workers
        self.timeout_s = float(timeout_s)
        self.max_stuck = max_stuck
        self.stats = PoolStats()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._runners: set[Any] = set()
        self._abandoned: list[_ThreadRunner] = []
        self._lock = threading.Lock()
        self._closed = False
        self._env_bytes: bytes | None = None
        self._load_error: str | None = None

    # -- public -------------------------------------------------------------------------------

    def submit(self, problems: Sequence[Problem], completions: Sequence[str]) -> PendingVerdicts:
        """Start verifying a batch; returns at once (``inline``: once it is verified)."""
        if len(problems) != len(completions):
            raise ValueError(f"submit: {len(problems)} problems but {len(completions)} completions")
        if self._closed:
            raise RuntimeError("submit on a closed VerifierPool")
        self._start()
        if batched(self.env) and self.kind != "process" and problems:
            budget = self.timeout_s * max(1.0, len(problems) / self.workers)
            jobs = [_Job(problems, completions, True, budget)]
        else:
            jobs = [_Job([p], [c], False, self.timeout_s) for p, c in zip(problems, completions)]
        for job in jobs:
            self._queue.put(job)
        pending = PendingVerdicts(self, jobs)
        if self.kind == "inline":
            pending.result()
        return pending

    def verify(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[Verdict]:
        """Verify a batch and wait for it."""
        return self.submit(problems, completions).result()

    def close(self) -> None:
        """Stop every worker: processes are killed; an abandoned thread is left to its daemon fate.
        Items not yet verified get an ``error`` verdict."""
        if self._closed:
            return
        self._closed = True
        for _ in self._slots:
            self._queue.put(None)
        with self._lock:
            runners = list(self._runners)
        for runner in runners:
            if isinstance(runner, _ProcessRunner):
                runner.kill()  # the slot waiting on it sees the pipe close, finishes its job and exits
        for slot in self._slots:
            slot.thread.join(1.0)
        while True:  # anything still queued
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.finish([Verdict.error("verifier pool closed")] * len(job.problems))

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

    def _start(self) -> None:
        if self._slots:
            return
        if self.kind == "process":
            try:
                self._env_bytes = pickle.dumps(self.env)
            except Exception as e:
                self._load_error = (f"environment {type(self.env).__name__} cannot be sent to a worker process "
                                    f"({type(e).__name__}: {e}); use the thread kind or make it picklable")
        self._slots = [_Slot(self, i) for i in range(self.workers)]

    def _new_runner(self, index: int) -> Any:
        if self.kind == "process":
            runner: Any = _ProcessRunner(self._env_bytes, self._load_error, f"verify-worker-{index}")
        else:
            with self._lock:
                self._abandoned = [r for r in self._abandoned if r.alive]
                stuck = len(self._abandoned)
            if stuck >= self.max_stuck:
                raise _WorkerFailed(
                    f"not verified: {stuck} verifier threads are stuck in verify calls that never returned "
                    f"(budget {self.timeout_s:g} s; a thread cannot be stopped); use the process kind for a verifier that can hang")
            runner = _ThreadRunner(self.env, f"verify-{index}")
        with self._lock:
            self._runners.add(runner)
        return runner

    def _retire(self, runner: Any, hung: bool) -> None:
        with self._lock:
            self._runners.discard(runner)
            self.stats.restarts += 1
            if hung and isinstance(runner, _ThreadRunner):
                self._abandoned.append(runner)
                self.stats.abandoned += 1
        if isinstance(runner, _ProcessRunner):
            runner.close()

    def _collect(self, jobs: list[_Job]) -> list[Verdict]:
        verdicts: list[Verdict] = []
        for job in jobs:
            # every job finishes within its budget once a slot takes it; the loop only guards
            # against a pool closed (or its supervisors gone) while the caller waits
            while not job.done.wait(1.0):
                if self._closed or not any(s.thread.is_alive() for s in self._slots):
                    job.finish([Verdict.error("verifier pool closed before the item was verified")] * len(job.problems))
            verdicts += job.verdicts or []
        for v in verdicts:
            self.stats.verified += 1
            self.stats.errors += v.status.value == "error"
            self.stats.timeouts += v.status.value == "timeout"
        return verdicts
