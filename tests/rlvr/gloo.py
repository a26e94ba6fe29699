"""Run a function, or `rlvr train`, in two real processes joined by a gloo process group (CPU DDP's backend)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
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


def train_in_two_processes(*args: str, steps: int) -> str:
    """``rlvr train ARGS...`` under ``torchrun --nproc_per_node 2`` (one thread each); asserts it
    completed ``steps`` steps with one summary line, and returns its output."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "rlvr.cli", "train", *args]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.count(f"completed: {steps} steps") == 1
    return proc.stdout
