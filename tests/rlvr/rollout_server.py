"""`rlvr rollout serve` in its own process, for tests: vLLM's server in the vLLM lane, rlvr's own
Hugging Face engine (``engine="hf"``) anywhere.

A server of rlvr's own engine is `rlvr.cli.main` with the same arguments in a process forked from the
fork server the generation worker uses (`tests.forked.ForkedCLI`; `rlvr.rollout.worker.worker_context`), which
imported torch and transformers once for the test process, instead of ``python -m rlvr.cli``, which
imports them again for every server (about 9 s of CPU each on a 2-core machine, and these tests start
about twenty). It is a process of its own all the same: killed, stopped and signalled as one, with
its own environment and its console on a pipe. vLLM's server is started as a command: it runs
processes of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from tests.forked import ForkedCLI


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

