"""A cluster in one box: every process of a cluster, as real processes on 127.0.0.1.

- `env_server`: ``rlvr envs serve`` (verification, e.g. code-v1 running each completion in its sandbox);
- `rollout_server` (tests/rlvr/rollout_server.py): ``rlvr rollout serve --engine hf``;
- `Trainers`: ``torchrun --nproc-per-node N -m rlvr.cli train ...`` (gloo), its output in a file.

Each is killed on leaving its ``with`` block, whatever happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.forked import ForkedCLI
from tests.rlvr.gloo import free_port
from tests.rlvr.nodes import REPO, one_process_env
from tests.rlvr.rollout_server import ServerProcess
from tests.rlvr.rollout_server import rollout_server as _rollout_server

__all__ = ["Trainers", "env_server", "metrics", "rollout_server"]


class rollout_server(_rollout_server):
    """`tests.rlvr.rollout_server.rollout_server` as the command a user types (``python -m rlvr.cli
    rollout serve``), not forked from the test process: the commands are this lane's point."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, command=True, **kwargs)


class env_server(ServerProcess):
    """``rlvr envs serve ENV ARGS...`` on a free port of 127.0.0.1; the context is its URL.
    ``token`` is given through ``$RLVR_ENV_TOKEN``."""

    READY = r"serving .* on (http://\S+)"
    WHAT = "environment server"

    def __init__(self, env_id: str, *args: str, token: str):
        env = {**one_process_env(), "PYTHONUNBUFFERED": "1", "RLVR_ENV_TOKEN": token}
        self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "envs", "serve", env_id, "--port", "0", *args], cwd=REPO,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.url: str | None = None


class Trainers:
    """``rlvr train ARGS...`` in ``processes`` processes under one torchrun (a free rendezvous port on
    127.0.0.1, one thread each; one process: plain ``python -m rlvr.cli``), output in ``log``. ``forked``:
    the launcher and its ranks forked instead of started (`tests.forked.ForkedCLI`: the same torchrun and
    ``rlvr.cli``, without each process importing torch again), for the tests whose point is not the command."""

    def __init__(self, log: Path, *args: str, processes: int = 2, env: dict[str, str] | None = None, forked: bool = False):
        flags = ["--nproc-per-node", str(processes), "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
        launcher = [sys.executable, "-m", "torch.distributed.run", *flags, "-m", "rlvr.cli"] if processes > 1 else [sys.executable, "-m", "rlvr.cli"]
        self.command = [*launcher, "train", *args]
        self.torchrun = flags if processes > 1 else None
        self.args, self.forked = ["train", *args], forked
        self.log, self.env = log, {**one_process_env(), **(env or {})}
        self.proc: subprocess.Popen | ForkedCLI | None = None

    def __enter__(self) -> Trainers:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.forked:
            self.proc = ForkedCLI(self.args, self.env, stderr="stdout", cwd=REPO, new_session=True, torchrun=self.torchrun, log=self.log)
            return self
        with open(self.log, "w") as out:  # a file: a full pipe would stall the launcher
            self.proc = subprocess.Popen(self.command, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the launcher and its workers (a session of their own)
            self.proc.wait(timeout=60)


def metrics(run: Path) -> list[dict]:
    """The training rows of a run's ``metrics.jsonl``."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [row for row in (json.loads(line) for line in path.read_text().splitlines() if line.strip()) if "reward/mean" in row]
