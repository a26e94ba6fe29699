"""Run a function, or `rlvr train`, in two real processes joined by a gloo process group (CPU DDP's backend)."""

from __future__ import annotations

import os
import signal
import socket
from typing import Any, Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _with_signals(target: Callable[..., None], *args: Any) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # (the fork server holds the trainer's shutdown signals)
    target(*args)


def run_in_two_processes(target: Callable[..., None], *args: Any, timeout: float = 120) -> Any:
    """Run ``target(rank, world, port, *args, queue)`` on ranks 0 and 1, each a process forked from the fork server
    the generation worker uses (`rlvr.rollout.worker.worker_context`: torch imported once, not once per rank);
    return what rank 0 puts in ``queue``."""
    from rlvr.rollout.worker import start_holding_shutdown_signals, worker_context

    ctx = worker_context()
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_with_signals, args=(target, rank, 2, port, *args, queue)) for rank in range(2)]
    for p in procs:
        start_holding_shutdown_signals(p)
    result = queue.get(timeout=timeout)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return result


def train_in_two_processes(*args: str, steps: int) -> str:
    """``rlvr train ARGS...`` under ``torchrun --nproc_per_node 2`` (one thread each; the launcher and its ranks
    forked, `tests.forked`); asserts it completed ``steps`` steps with one summary line, and returns its output."""
    from tests.forked import run_forked

    proc = run_forked(["train", *args], {**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600, torchrun=["--nproc_per_node", "2"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count(f"completed: {steps} steps") == 1
    return proc.stdout
