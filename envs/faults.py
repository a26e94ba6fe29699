"""Fault injection for tests: ``RLVR_KILL_AT=POINT:N`` makes the process SIGKILL itself the Nth
time it reaches ``POINT``, exactly as a kill from outside at that moment would (no handler, no
cleanup). ``RLVR_OOM_AT=POINT:N`` raises there instead the error CUDA raises when it runs out of
memory (as a RuntimeError whose message torch's starts with), so the handling of an out-of-memory
error is tested on a machine without a GPU. ``RLVR_FAULT_COUNTS=FILE`` writes how often each point
was reached, at exit, so a test can pick kill points across a whole run.

Points: ``generate`` (each decoded token of a batch), ``verify`` (each batch a verifier worker
verifies), ``optimizer_step`` (after the backward passes, before the weights change),
``checkpoint_write`` (components written, the checkpoint not yet complete). Unset, `reached` costs
one attribute read.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import threading
from collections import Counter

POINTS = ("generate", "verify", "optimizer_step", "checkpoint_write")


def _target(variable: str) -> tuple[str, int] | None:
    spec = os.environ.get(variable, "")
    if not spec:
        return None
    point, _, n = spec.partition(":")
    if point not in POINTS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"{variable}={spec!r}: expected POINT:N with POINT one of {', '.join(POINTS)} and N >= 1")
    return point, int(n)


class _Faults:
    def __init__(self) -> None:
        self.counts_file = os.environ.get("RLVR_FAULT_COUNTS", "")
        self.target = _target("RLVR_KILL_AT")
        self.oom = _target("RLVR_OOM_AT")
        self.active = bool(self.target or self.oom or self.counts_file)
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        if self.counts_file:
            atexit.register(lambda: open(self.counts_file, "w").write(json.dumps(self.counts)))

    def reached(self, point: str) -> None:
        with self.lock:
            self.counts[point] += 1
            hit = self.target == (point, self.counts[point])
            oom = self.oom == (point, self.counts[point])
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        if oom:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected by RLVR_OOM_AT={point}:{self.counts[point]})")


_FAULTS = _Faults()


def reached(point: str) -> None:
    """Mark that this process is at fault point ``point`` (see the module docstring)."""
    if _FAULTS.active:
        _FAULTS.reached(point)
