"""A supervised pool of sympy worker processes with a hard deadline per request.

Why processes: a sympy simplification cannot be interrupted from another thread, and SIGALRM only
works in a process's main thread. So the expensive path runs in child processes
(``python -m envs.math.symbolic``) spoken to over pipes; the caller waits with ``poll`` until
its deadline and, if the answer is late, kills the child (SIGKILL) and starts a replacement. This
works from any thread, from worker processes of a `multiprocessing.Pool` (which may not fork
children of their own through `multiprocessing`: we use `subprocess`), and after ``fork`` (each
process id gets its own pool). Each child runs under an address-space limit (``memory_mb``).

A request that does not get an answer in time returns None: the caller reports ``timeout``.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sandboxes import waiting

DEFAULT_WORKERS = 2
DEFAULT_MEMORY_MB = 2048
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds `envs/`


class _Child:
    """One worker process and its line buffer."""

    def __init__(self, memory_mb: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        env.setdefault("OMP_NUM_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "envs.math.symbolic", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True, start_new_session=True,
        )
        self.buf = b""
        self.ready = False
        self.next_id = 0

    def readline(self, deadline: float) -> bytes | None:
        """One line from the child, or None if it is not there by ``deadline`` (or the child died)."""
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable = waiting.ready([fd], remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None  # EOF: the child exited (e.g. hit its memory limit)
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except Exception:
                pass


class SymbolicPool:
    """Up to ``size`` sympy workers; `call` sends one request with a deadline.

    Thread-safe: a thread checks a worker out for the duration of one request.
    """

    def __init__(self, size: int = DEFAULT_WORKERS, memory_mb: int = DEFAULT_MEMORY_MB):
        if size < 1:
            raise ValueError(f"symbolic pool size must be >= 1, got {size}")
        self.size = size
        self.memory_mb = memory_mb
        self._idle: list[_Child] = []
        self._alive = 0
        self._cond = threading.Condition()
        self.kills = 0
        self.requests = 0

    def start(self) -> None:
        """Start missing workers without waiting for them (they import sympy in the background)."""
        with self._cond:
            while self._alive < self.size:
                self._idle.append(_Child(self.memory_mb))
                self._alive += 1
            self._cond.notify_all()

    def warmup(self, timeout: float = 60.0) -> bool:
        """Start the workers and wait until every one has imported sympy; True if all are ready."""
        self.start()
        deadline = time.monotonic() + timeout
        with self._cond:
            children = list(self._idle)
        ok = True
        for child in children:
            ok &= self._await_ready(child, deadline)
        return ok

    def _await_ready(self, child: _Child, deadline: float) -> bool:
        if not child.ready:
            line = child.readline(deadline)
            child.ready = line == b"ready"
        return child.ready

    def call(self, request: dict[str, Any], deadline: float) -> dict[str, Any] | None:
        """Send ``request`` to a worker; its answer, or None if none came before ``deadline``."""
        child = self._checkout(deadline)
        if child is None:
            return None
        self.requests += 1
        if not self._await_ready(child, deadline):
            dead = child.proc.poll() is not None
            self._checkin(child, discard=dead)  # still importing sympy: keep it for the next call
            return None
        child.next_id += 1
        request = {**request, "id": child.next_id}
        try:
            child.proc.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
            child.proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            self._checkin(child, discard=True)
            return None
        line = child.readline(deadline)
        if line is None:
            self.kills += 1
            self._checkin(child, discard=True)  # late or dead: kill it, a fresh one replaces it
            return None
        try:
            response = json.loads(line)
        except ValueError:
            self._checkin(child, discard=True)
            return None
        if response.get("id") != child.next_id:
            self._checkin(child, discard=True)
            return None
        self._checkin(child, discard=False)
        return response

    def _checkout(self, deadline: float) -> _Child | None:
        with self._cond:
            while True:
                if self._alive < self.size:
                    self._idle.append(_Child(self.memory_mb))
                    self._alive += 1
                if self._idle:
                    # prefer a worker that is already ready
                    ready = [c for c in self._idle if c.ready]
                    child = ready[0] if ready else self._idle[0]
                    self._idle.remove(child)
                    return child
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def _checkin(self, child: _Child, discard: bool) -> None:
        if discard:
            child.kill()
        with self._cond:
            if discard:
                self._alive -= 1
                self._idle.append(_Child(self.memory_mb))  # replace at once: it warms up meanwhile
                self._alive += 1
            else:
                self._idle.append(child)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            children, self._idle = self._idle, []
            self._alive = 0
        for c in children:
            c.kill()


_pool: SymbolicPool | None = None
_pool_pid = -1
_pool_lock = threading.Lock()
_pool_config: dict[str, int] = {"size": DEFAULT_WORKERS, "memory_mb": DEFAULT_MEMORY_MB}


def get_pool() -> SymbolicPool:
    """This process's pool (a forked child gets its own, never its parent's pipes)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = SymbolicPool(**_pool_config)
            _pool_pid = os.getpid()
        return _pool


def configure(size: int = DEFAULT_WORKERS, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
    """Set the pool's size and per-worker memory limit (replaces this process's pool)."""
    global _pool
    with _pool_lock:
        _pool_config.update(size=size, memory_mb=memory_mb)
        if _pool is not None and _pool_pid == os.getpid():
            _pool.close()
        _pool = None


def _shutdown() -> None:
    if _pool is not None and _pool_pid == os.getpid():
        _pool.close()


atexit.register(_shutdown)
