"""`rlvr rollout serve` in its own process, for tests: vLLM's server in the vLLM lane, rlvr's own
Hugging Face engine (``engine="hf"``) anywhere.

A server of rlvr's own engine is `rlvr.cli.main` with the same arguments in a process forked from the
fork server the generation worker uses (`ForkedCLI`; `rlvr.rollout.worker.worker_context`), which
imported torch and transformers once for the test process, instead of ``python -m rlvr.cli``, which
imports them again for every server (about 9 s of CPU each on a 2-core machine, and these tests start
about twenty). It is a process of its own all the same: killed, stopped and signalled as one, with
its own environment and its console on a pipe. vLLM's server is started as a command: it runs
processes of its own."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any


class _Inherited:
    """A file descriptor a forked child is given with its start (pickled as a duplicate of it)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return (_Inherited._detach, (reduction.DupFd(self.fd),))

    @staticmethod
    def _detach(dup: Any) -> int:
        return dup.detach()


def _run_cli(argv: list[str], environ: dict[str, str], cwd: str, out: int) -> None:
    """In the forked child: become ``python -m rlvr.cli ARGV`` with ``environ``, its console on ``out``."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # (the fork server holds the trainer's shutdown signals)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rlvr.rollout.worker import _die_with_parent

    _die_with_parent()  # with the fork server, i.e. with the test process
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    os.dup2(out, 1)
    os.close(out)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    sys.stdout.reconfigure(line_buffering=True)
    from rlvr.cli import main

    sys.exit(main(argv))


class ForkedCLI:
    """``rlvr ARGV`` in a process forked from the fork server: the parts of `subprocess.Popen` the
    tests use (``pid``, ``stdout`` as text, ``poll``, ``wait``, ``returncode``, signals)."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        from multiprocessing import resource_tracker

        from rlvr.rollout.worker import SHUTDOWN_SIGNALS, worker_context

        ctx = worker_context("rlvr.rollout.engines.serve")
        read, write = os.pipe()
        self._process = ctx.Process(target=_run_cli, args=(argv, env, os.getcwd(), _Inherited(write)), name="rlvr-test-server", daemon=True)
        resource_tracker.ensure_running()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SHUTDOWN_SIGNALS)  # (a fork server started here holds them, as the worker's does)
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(write)
        self.pid = self._process.pid
        self.stdout = open(read, encoding="utf-8", errors="replace")

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return None if self._process.is_alive() else self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.is_alive():
            raise subprocess.TimeoutExpired("rlvr (forked)", timeout)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.is_alive():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ServerProcess:
    """A server CLI in its own process (``self.proc``, text stdout) whose URL is the first match of
    ``READY`` in its output; the context is that URL, and the process is killed on exit whatever happened."""

    READY = r"ready on (http://\S+)"
    WHAT = "server"

    def __enter__(self) -> str:
        try:
            deadline = time.monotonic() + 300
            seen: list[str] = []
            while time.monotonic() < deadline:
                line = self.proc.stdout.readline()
                if not line and self.proc.poll() is not None:
                    raise RuntimeError(f"{self.WHAT} exited with {self.proc.returncode}: {''.join(seen)[-2000:]}")
                seen.append(line)
                m = re.search(self.READY, line)
                if m:
                    self.url = m.group(1)
                    return self.url
            raise RuntimeError(f"{self.WHAT} did not start in 300 s")
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """Kill the server at once (no drain): a server that dies."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=60)

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc.stdout.close()


class rollout_server(ServerProcess):
    """`rlvr rollout serve` on ``path`` in its own process, on ``port`` (0: a free one); the context is its URL.

    ``engine="hf"`` serves rlvr's own engine (``settings`` such as ``hf.decode=kv``), in a `ForkedCLI`
    unless ``command`` (then as ``python -m rlvr.cli``, the command a user types); ``token`` is given
    through ``$RLVR_ROLLOUT_TOKEN``. The process is killed on exit whatever happened."""

    def __init__(self, path, *settings: str, engine: str = "vllm", port: int = 0, token: str | None = None, device: str = "auto",
                 command: bool = False):
        extra = ("vllm.dtype=float32",) if engine == "vllm" else ()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"OMP_NUM_THREADS": "1"} if engine == "hf" else {})}  # several on a small machine
        env.pop("RLVR_ROLLOUT_TOKEN", None)
        if token:
            env["RLVR_ROLLOUT_TOKEN"] = token
        self.url: str | None = None
        argv = ["rollout", "serve", "--engine", engine, "--model", str(path), "--port", str(port), "--device", device, *extra, *settings]
        if engine == "hf" and not command:
            self.proc = ForkedCLI(argv, env)
        else:
            self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)

