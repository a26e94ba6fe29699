"""Several torchrun "nodes" on this machine: one ``torchrun --nnodes N`` launcher per node, joined
by a c10d rendezvous on 127.0.0.1, one process (gloo) each: the commands of a cluster, on one box.

Every launcher starts in a session of its own and is bounded by the caller's timeout; leaving the
``with`` block kills whatever is still running (launchers and their workers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import psutil

from tests.rlvr.gloo import free_port

REPO = Path(__file__).resolve().parents[2]


def node_command(node: int, nodes: int, port: int, module: str, *args: str) -> list[str]:
    """The torchrun command of node ``node`` of ``nodes`` (the one documented in docs/scaling.md)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(node), "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "-m", module, *args]


def one_process_env(**extra: str) -> dict[str, str]:
    """The environment of a test's training process: one thread, this checkout first on the path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **extra}


class LocalNodes:
    """``nodes`` torchrun launchers of ``python -m MODULE ARGS...``; their output goes to
    ``log_dir/node-I.log`` (a file: a full pipe would stall a launcher)."""

    def __init__(self, log_dir: Path, module: str, *args: str, nodes: int = 2, env: dict[str, str] | None = None):
        self.log_dir, self.nodes = log_dir, nodes
        port = free_port()
        self.commands = [node_command(i, nodes, port, module, *args) for i in range(nodes)]
        self.env = env or one_process_env()
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> LocalNodes:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i, cmd in enumerate(self.commands):
            with open(self.log_dir / f"node-{i}.log", "w") as log:
                self.procs.append(subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return self

    def __exit__(self, *exc) -> None:
        for i in range(len(self.procs)):
            self.kill(i)

    def wait(self, timeout: float) -> list[int]:
        """Every launcher's exit code (raises ``subprocess.TimeoutExpired`` past ``timeout`` seconds in all)."""
        deadline = time.monotonic() + timeout
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in self.procs]

    def wait_for(self, condition: Callable[[], bool], timeout: float) -> None:
        """Poll ``condition`` until it holds; fails if a launcher exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not condition():
            ended = [i for i, p in enumerate(self.procs) if p.poll() is not None]
            assert not ended, f"node {ended[0]} ended first:\n{self.output(ended[0])[-3000:]}"
            assert time.monotonic() < deadline, f"still waiting after {timeout} s"
            time.sleep(0.2)

    def node_of_rank(self) -> dict[int, int]:
        """Which node runs each rank: with c10d the rendezvous orders the nodes (``--node-rank`` is
        ignored), so this reads the ``RANK`` torchrun gave each node's worker."""
        found = {}
        for i, p in enumerate(self.procs):
            for child in psutil.Process(p.pid).children(recursive=True):
                rank = child.environ().get("RANK")
                if rank is not None:
                    found[int(rank)] = i
        return found

    def kill(self, node: int) -> None:
        """SIGKILL node ``node``: its launcher and every process under it (torchrun starts each
        worker in a session of its own, so killing the launcher's group alone leaves them running)."""
        try:
            launcher = psutil.Process(self.procs[node].pid)
            victims = [launcher, *launcher.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in victims:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        self.procs[node].wait(timeout=30)

    def output(self, node: int) -> str:
        return (self.log_dir / f"node-{node}.log").read_text(errors="replace")
