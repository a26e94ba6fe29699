"""Worker threads that can be abandoned: a call that never returns never holds up the process.

`concurrent.futures.ThreadPoolExecutor` joins its threads at interpreter exit, even after
``shutdown(wait=False)``, so one environment call stuck forever (a ``verify`` or a ``step`` that
never returns) keeps the process alive after its work is done. `DaemonExecutor` runs calls in
daemon threads instead: the caller waits on a `concurrent.futures.Future` with a timeout, gives up
on a call that overruns it, and the interpreter exits without waiting for the thread. The verifier
pool (`envs.pool`) and the step runner (`envs.episode`) both run environment code on it.
"""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
import time
from typing import Any, Callable


class DaemonExecutor:
    """Runs calls in up to ``max_workers`` daemon threads, started as calls arrive.

    A thread stuck in a call stays stuck (a thread cannot be stopped) and counts against
    ``max_workers`` until the call returns; calls beyond that wait in the queue.

    Args:
        max_workers: Threads at most.
        name: Prefix of the threads' names.
    """

    def __init__(self, max_workers: int, name: str):
        if max_workers < 1:
            raise ValueError(f"DaemonExecutor: max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.name = name
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)  # released by a thread each time it finishes a call
        self._lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> cf.Future:
        """Start ``fn(*args)`` in a thread; its result (or exception) arrives on the future."""
        future: cf.Future = cf.Future()
        with self._lock:
            if self._shut:
                raise RuntimeError(f"{self.name}: submit after shutdown")
            self._calls.put((future, fn, args))
            # a thread that finished its last call takes this one; otherwise start another
            if not self._idle.acquire(timeout=0) and len(self._threads) < self.max_workers:
                thread = threading.Thread(target=self._loop, name=f"{self.name}-{len(self._threads)}", daemon=True)
                self._threads.append(thread)
                thread.start()
        return future

    @property
    def alive(self) -> bool:
        """Whether any thread is still running (a stuck call keeps its thread alive)."""
        return any(t.is_alive() for t in self._threads)

    def shutdown(self, wait_s: float = 0.0) -> None:
        """Cancel the calls not started and let every thread exit once its call returns (a stuck
        one is abandoned: being a daemon, it never delays the interpreter's exit). Waits at most
        ``wait_s`` in all for the threads to exit: idle ones do at once, so a closing pool leaves no
        thread to run into the interpreter's finalisation (where a thread still inside native code
        can crash the process)."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
            while True:
                try:
                    item = self._calls.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
            for _ in self._threads:
                self._calls.put(None)
        deadline = time.monotonic() + wait_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as e:  # noqa: BLE001 - e.g. SystemExit from environment code: the caller decides
                    future.set_exception(e)
            self._idle.release()
