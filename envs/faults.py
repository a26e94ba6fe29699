"""Fault injection for tests: ``RLVR_KILL_AT=POINT:N`` makes the process SIGKILL itself the Nth
time it reaches ``POINT``, exactly as a kill from outside at that moment would (no handler, no
cleanup). ``RLVR_OOM_AT=POINT:N`` raises there instead the error CUDA raises when it runs out of
memory (as a RuntimeError whose message torch's starts with), so the handling of an out-of-memory
error is tested on a machine without a GPU. ``RLVR_STALL_AT=POINT:N`` makes the process hang there
(sleep until killed), as a deadlocked engine or a stuck collective would. ``RLVR_FAULT_COUNTS=FILE``
writes how often each point was reached, at exit, so a test can pick kill points across a whole run.

Points: ``generate`` (each decoded token of a batch), ``verify`` (each batch a verifier worker
verifies), ``optimizer_step`` (after the backward passes, before the weights change),
``checkpoint_write`` (components written, the checkpoint not yet complete); in asynchronous runs
(`ASYNC_POINTS`) also ``queued`` (the trainer takes a batch while at least one more finished batch
waits in the queue: samples are in flight), and in their generation worker ``generate_call`` (each
generate call it is asked for: one a batch for a run without a group filter).

The generation worker of an asynchronous run (`rlvr.rollout.worker`) is a process of its own: it
ignores the variables above and obeys ``RLVR_WORKER_KILL_AT``, ``RLVR_WORKER_STALL_AT`` (same
syntax) in its first incarnation only: a worker started again after a death runs clean, as a real
restart after a one-off crash would. Unset, `reached` costs one attribute read.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Iterator

POINTS = ("generate", "verify", "optimizer_step", "checkpoint_write")
ASYNC_POINTS = ("queued", "generate_call")
ALL_POINTS = POINTS + ASYNC_POINTS


def _target(variable: str) -> tuple[str, int] | None:
    spec = os.environ.get(variable, "")
    if not spec:
        return None
    point, _, n = spec.partition(":")
    if point not in ALL_POINTS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"{variable}={spec!r}: expected POINT:N with POINT one of {', '.join(ALL_POINTS)} and N >= 1")
    return point, int(n)


class _Faults:
    def __init__(self, prefix: str | None = "RLVR_") -> None:
        read = (lambda name: os.environ.get(prefix + name, "")) if prefix else (lambda name: "")
        self.counts_file = read("FAULT_COUNTS")
        self.target = _target(prefix + "KILL_AT") if prefix else None
        self.oom = _target(prefix + "OOM_AT") if prefix else None
        self.stall = _target(prefix + "STALL_AT") if prefix else None
        self.active = bool(self.target or self.oom or self.stall or self.counts_file)
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        if self.counts_file:
            atexit.register(self._write_counts)

    def _write_counts(self) -> None:
        if _FAULTS is self:  # a worker process that replaced its inherited settings does not write the trainer's file
            with open(self.counts_file, "w") as f:
                f.write(json.dumps(self.counts))

    def reached(self, point: str) -> None:
        with self.lock:
            self.counts[point] += 1
            hit = self.target == (point, self.counts[point])
            oom = self.oom == (point, self.counts[point])
            stall = self.stall == (point, self.counts[point])
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)
        if oom:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate 2.00 GiB (injected by RLVR_OOM_AT={point}:{self.counts[point]})")
        while stall:
            time.sleep(60)


_FAULTS = _Faults()


def configure() -> None:
    """Read the ``RLVR_*`` fault variables again: in a process forked from one that imported this
    module before they were set (a fork server's child)."""
    global _FAULTS
    _FAULTS = _Faults()


def reached(point: str) -> None:
    """Mark that this process is at fault point ``point`` (see the module docstring)."""
    if _FAULTS.active:
        _FAULTS.reached(point)


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Within the block, count the points this process reaches (what ``RLVR_FAULT_COUNTS`` writes for a
    whole process) and inject no fault: a test that needs only the counts runs the code in the test's
    process instead of starting one."""
    global _FAULTS
    outer, _FAULTS = _FAULTS, _Faults(None)
    _FAULTS.active = True
    try:
        yield _FAULTS.counts
    finally:
        _FAULTS = outer


def configure_worker(first_start: bool) -> None:
    """In a generation worker process: obey the ``RLVR_WORKER_*`` variables (only when ``first_start``)
    instead of the trainer's."""
    global _FAULTS
    _FAULTS = _Faults("RLVR_WORKER_" if first_start else None)
