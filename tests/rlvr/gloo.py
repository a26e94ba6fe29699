"""Run a function in two real processes joined by a gloo process group (CPU DDP's backend)."""

from __future__ import annotations

import socket
from typing import Any, Callable

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_in_two_processes(target: Callable[..., None], *args: Any, timeout: float = 120) -> Any:
    """Spawn ``target(rank, world, port, *args, queue)`` on ranks 0 and 1; return what rank 0 puts in ``queue``."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(rank, 2, port, *args, queue)) for rank in range(2)]
    for p in procs:
        p.start()
    result = queue.get(timeout=timeout)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return result
