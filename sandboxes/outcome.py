"""Turning what a sandbox observed into an `ExecStatus`: one rule set for every backend."""

from __future__ import annotations

import os
import signal

from sandboxes.types import ExecStatus, Limits


def classify(*, limits: Limits, limit_hit: str | None, exit_code: int | None, cpu_s: float,
             oom_kills: int = 0, stderr: bytes = b"") -> ExecStatus:
    """The status of a finished job.

    Args:
        limit_hit: ``"timeout"`` or ``"output_limit"`` when a watchdog killed the job.
        exit_code: Exit status, negative for a signal (as in `subprocess`).
        cpu_s: CPU seconds the job used (RLIMIT_CPU kills with SIGXCPU, then SIGKILL).
        oom_kills: OOM kills the job's cgroup recorded during the job.
        stderr: The tail decides a Python ``MemoryError`` under the address-space limit.
    """
    if limit_hit == "timeout":
        return ExecStatus.TIMEOUT
    if limit_hit == "output_limit":
        return ExecStatus.OUTPUT_LIMIT
    if oom_kills > 0:
        return ExecStatus.MEMORY
    if exit_code is not None and exit_code < 0:
        sig = -exit_code
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_s):
            return ExecStatus.TIMEOUT
        return ExecStatus.KILLED
    if exit_code and stderr.rstrip().rsplit(b"\n", 1)[-1].startswith(b"MemoryError"):
        return ExecStatus.MEMORY
    return ExecStatus.OK


def exit_code_from_wait_status(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def signal_name(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"
