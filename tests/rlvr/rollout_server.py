"""`rlvr rollout serve` in its own process, for the vLLM lane's tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time


class rollout_server:
    """`rlvr rollout serve` on ``path`` in its own process, on a free port; the context is its URL."""

    def __init__(self, path, *settings: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "rlvr.cli", "rollout", "serve", "--model", str(path), "--port", "0",
                                      "vllm.dtype=float32", *settings], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def __enter__(self) -> str:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"rollout server exited with {self.proc.returncode}")
            m = re.search(r"ready on (http://\S+)", line)
            if m:
                return m.group(1)
        raise RuntimeError("rollout server did not start in 300 s")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
