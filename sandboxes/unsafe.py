"""Running untrusted code WITHOUT isolation: an explicit, loud opt-in for machines with no sandbox.

It has rlimits, its own session and a temporary directory, and nothing else: the program can read
your files and secrets, open network connections, and leave processes behind. It is never chosen
automatically. Building it needs both ``allow_unsandboxed=True`` and the environment variable
``RLVR_ALLOW_UNSANDBOXED=1``; each construction logs a warning and every execution says so in
``info["unsandboxed"]``.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from sandboxes.backend import Availability, Backend
from sandboxes.outcome import classify, signal_name
from sandboxes.types import Execution, Job, SandboxError

OPT_IN_ENV = "RLVR_ALLOW_UNSANDBOXED"
WARNING = ("UNSANDBOXED EXECUTION: untrusted programs will run as your user with access to your files, "
           "network and processes. Use only on a disposable machine.")


class UnsafeBackend(Backend):
    """A subprocess per job, no isolation (see the module docstring).

    Args:
        allow_unsandboxed: Must be True (and ``RLVR_ALLOW_UNSANDBOXED=1`` set).
        python: Interpreter (default: this one).
    """

    name = "unsafe"

    def __init__(self, allow_unsandboxed: bool = False, python: str = "", concurrency: int | None = None):
        if not allow_unsandboxed or os.environ.get(OPT_IN_ENV) != "1":
            raise SandboxError(f"the 'unsafe' backend runs untrusted code without isolation; to opt in pass allow_unsandboxed=True "
                               f"AND set {OPT_IN_ENV}=1 (current value: {os.environ.get(OPT_IN_ENV)!r})")
        warnings.warn(WARNING, RuntimeWarning, stacklevel=2)
        print(f"WARNING: {WARNING}", file=sys.stderr)
        self.python = python or sys.executable
        self.concurrency = concurrency or os.cpu_count() or 1

    @classmethod
    def probe(cls) -> Availability:
        if os.environ.get(OPT_IN_ENV) != "1":
            return Availability(False, f"not opted in: needs {OPT_IN_ENV}=1 and allow_unsandboxed=True (no isolation at all)")
        return Availability(True)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "isolation": "NONE", "python": self.python}

    def run(self, job: Job) -> Execution:
        lim = job.limits

        def limit() -> None:
            cpu = max(1, int(-(-lim.cpu_s // 1)))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_AS, ((lim.memory_mb + 256) << 20,) * 2)
            resource.setrlimit(resource.RLIMIT_FSIZE, ((lim.file_size_mb << 20),) * 2)

        with tempfile.TemporaryDirectory(prefix="rlvr-unsafe-") as tmp:
            for name, content in {**job.files, "main.py": job.code.encode()}.items():
                path = Path(tmp, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            t0 = time.monotonic()
            proc = subprocess.Popen([self.python, "-s", "main.py"], cwd=tmp, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, preexec_fn=limit,
                                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "HOME": tmp})
            limit_hit = None
            try:
                out, err = proc.communicate(job.stdin, timeout=lim.wall_s)
            except subprocess.TimeoutExpired:
                limit_hit = "timeout"
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            wall = time.monotonic() - t0
        total = len(out) + len(err)
        if total > lim.output_bytes:
            limit_hit = limit_hit or "output_limit"
            out = out[: lim.output_bytes]
            err = err[: max(0, lim.output_bytes - len(out))]
        exit_code = proc.returncode
        status = classify(limits=lim, limit_hit=limit_hit, exit_code=exit_code, cpu_s=0.0, stderr=err)
        info: dict[str, Any] = {"unsandboxed": True}
        if signal_name(exit_code):
            info["signal"] = signal_name(exit_code)
        return Execution(status=status, exit_code=exit_code, stdout=out, stderr=err, wall_s=wall, backend=self.name, info=info)
