"""The sandbox supervisor: the trusted code that runs *inside* a sandbox and starts jobs.

This module is self-contained (standard library only): the host passes its source to a fresh
interpreter inside bubblewrap (``python -I -c <source> serve|oneshot``), so nothing of the
project needs to be visible in the sandbox. The host also imports it for the wire format.

Two modes:

``serve`` (the fast local backend): a long-lived supervisor. For each job it forks a *reaper*
that joins the job's cgroup and enters a fresh PID namespace (the supervisor has mounted a
fresh size- and inode-limited tmpfs as the job's scratch directory), and forks the namespace's *init*
(PID 1), which forks the job (PID 2, so signals behave as usual). The job drops to an
unprivileged uid, sets rlimits, loads the seccomp filter and runs the code in the already-warm
interpreter (no interpreter start per job). When the job ends, its init reports and exits, and
the kernel kills every process left in the namespace, so daemons, double forks and ``setsid``
children cannot outlive the job; the job cannot see, signal or ptrace the
supervisor. The supervisor enforces the wall clock and the output budget itself (it reads the
job's pipes), and the host kills the job's cgroup or the whole sandbox if the supervisor ever
misses its deadline.

``oneshot`` (the per-process backend): one job per sandbox. The bootstrap joins the cgroup,
writes the files, drops privileges, sets rlimits and seccomp, and ``exec``s a fresh interpreter
on ``main.py``; the host reads its output directly.

Wire format (host <-> supervisor): a 4-byte big-endian length, a JSON header with a ``sizes``
list, then that many raw byte blobs. Data only: nothing is ever unpickled.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import select
import signal
import struct
import sys
import time

# -- wire format ------------------------------------------------------------------------------

MAX_HEADER = 1 << 20


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, need = [], n
    while need:
        chunk = os.read(fd, min(need, 1 << 20))
        if not chunk:
            raise EOFError(f"pipe closed with {need} of {n} bytes unread")
        chunks.append(chunk)
        need -= len(chunk)
    return b"".join(chunks)


def encode_message(header: dict, blobs: list = ()) -> bytes:
    head = json.dumps({**header, "sizes": [len(b) for b in blobs]}, separators=(",", ":")).encode()
    return struct.pack(">I", len(head)) + head + b"".join(bytes(b) for b in blobs)


def send_message(fd: int, header: dict, blobs: list = ()) -> None:
    _write_all(fd, encode_message(header, blobs))


def recv_message(fd: int, max_blob_bytes: int = 1 << 30) -> tuple[dict, list]:
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    if n > MAX_HEADER:
        raise ValueError(f"message header of {n} bytes exceeds {MAX_HEADER}")
    header = json.loads(_read_exact(fd, n))
    sizes = header.pop("sizes", [])
    if not isinstance(sizes, list) or any(not isinstance(s, int) or s < 0 for s in sizes) or sum(sizes) > max_blob_bytes:
        raise ValueError("malformed message sizes")
    return header, [_read_exact(fd, s) for s in sizes]


# -- kernel interfaces (ctypes; the sandbox has no compiler and no project code) -------------

_libc = None

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 4, 38, 22, 36
SECCOMP_MODE_FILTER = 2


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def unshare(flags: int) -> None:
    _check(libc().unshare(ctypes.c_int(flags)), "unshare")


def mount(source, target, fstype, flags: int, data) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


MNT_DETACH = 2


def umount(target: str) -> None:
    _check(libc().umount2(target.encode(), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def prctl(option: int, arg: int = 0) -> None:
    _check(libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), f"prctl {option}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class SeccompProgram:
    """A classic-BPF filter prepared once (ctypes structures built in the supervisor, so a job
    only pays for the prctl call)."""

    def __init__(self, program: bytes):
        if len(program) % 8:
            raise ValueError("seccomp program length is not a multiple of 8")
        self.program = program
        self._buf = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // 8, ctypes.cast(self._buf, ctypes.c_void_p))

    def load(self) -> None:
        """Install the filter on this process (``no_new_privs`` must already be set)."""
        _check(libc().prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(self._fprog),
                            ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(PR_SET_SECCOMP)")


def load_seccomp(program: bytes) -> None:
    """Install a classic-BPF seccomp filter (``no_new_privs`` must already be set)."""
    SeccompProgram(program).load()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


def clear_capabilities() -> None:
    """Drop every capability of this process (needed when it stays uid 0 inside a user namespace)."""
    nr = SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise OSError(f"no capset syscall number for {os.uname().machine}")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(libc().syscall(ctypes.c_long(nr), ctypes.byref(header), ctypes.byref(data)), "capset")


# -- the jail: what every job goes through before its code runs --------------------------------

def set_rlimits(limits: dict, address_space_base: int, *, pids_cgroup: bool = False) -> None:
    """Per-process limits. ``pids_cgroup``: the job's cgroup bounds its processes (pids.max), so
    RLIMIT_NPROC, which counts every process of the uid on the machine (other jobs' included: a
    fork bomb in one sandbox would starve another's threads), is left alone."""
    import resource

    cpu = max(1, int(-(-limits["cpu_s"] // 1)))
    memory = int(limits["memory_mb"]) << 20
    fsize = int(limits["file_size_mb"]) << 20
    pairs = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (address_space_base + memory,) * 2,
        resource.RLIMIT_FSIZE: (fsize, fsize),
        resource.RLIMIT_NOFILE: (int(limits["open_files"]),) * 2,
        resource.RLIMIT_CORE: (0, 0),
        resource.RLIMIT_MEMLOCK: (0, 0),
        resource.RLIMIT_MSGQUEUE: (0, 0),
    }
    if hasattr(resource, "RLIMIT_NPROC") and not pids_cgroup:
        # without a cgroup the only bound on forks, shared by every job of the uid
        pairs[resource.RLIMIT_NPROC] = (int(limits["processes"]),) * 2
    for which, value in pairs.items():
        resource.setrlimit(which, value)


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` with no supplementary groups and no capabilities.

    As real root the job becomes an unprivileged uid of the host. In a user namespace (an
    unprivileged host user) only one uid is mapped, so the job keeps it and loses its capabilities.
    """
    if os.getuid() == 0 and uid != 0:
        try:
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        except OSError:
            if not _in_user_namespace():
                raise
    if os.getuid() == 0 or not _INHERITABLE_CLEARED:
        clear_capabilities()  # also the inheritable set, which a uid change leaves behind
    prctl(PR_SET_DUMPABLE, 0)


_INHERITABLE_CLEARED = False


def clear_inheritable_capabilities() -> None:
    """Empty this process's inheritable (and so ambient) capability set, keeping the others, so
    that children that change uid are left with no capabilities at all without a capset each."""
    global _INHERITABLE_CLEARED
    nr = SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        return
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(libc().syscall(ctypes.c_long(nr - 1), ctypes.byref(header), ctypes.byref(data)), "capget")  # capget = capset - 1
    for d in data:
        d.inheritable = 0
    _check(libc().syscall(ctypes.c_long(nr), ctypes.byref(header), ctypes.byref(data)), "capset")
    _INHERITABLE_CLEARED = True


def _in_user_namespace() -> bool:
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def lock_down(seccomp_program) -> None:
    """``no_new_privs``, then the seccomp filter (bytes, or a prepared `SeccompProgram`)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if isinstance(seccomp_program, SeccompProgram):
        seccomp_program.load()
    elif seccomp_program:
        load_seccomp(seccomp_program)


def write_files(root: str, files: dict) -> None:
    for name, content in files.items():
        path = os.path.join(root, name)
        if os.path.dirname(name):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)


# -- cgroups, as seen from inside the sandbox --------------------------------------------------

class JobCgroup:
    """The per-job cgroup(s) bind-mounted into the sandbox by the host.

    ``dirs`` maps a controller name (``memory``, ``pids``; ``unified`` for cgroup v2) to the
    sandbox path of this worker's cgroup directory, which holds ``job``: the supervisor of the
    local backend lives there with its jobs (no migration per job); the per-process bootstrap
    joins it.
    """

    def __init__(self, version: int, dirs: dict):
        self.version = version
        self.dirs = dirs
        self._written: dict = {}  # path -> value last written (a limit write costs the kernel work)

    def _set(self, path: str, value: str) -> None:
        if self._written.get(path) != value:
            self._write(path, value)
            self._written[path] = value

    def _job(self, ctrl: str, name: str) -> str:
        return os.path.join(self.dirs[ctrl], "job", name)

    def _mem_dir(self):
        return "unified" if self.version == 2 else "memory"

    def _pids_dir(self):
        return "unified" if self.version == 2 else "pids"

    @staticmethod
    def _write(path: str, value: str) -> None:
        with open(path, "w") as f:
            f.write(value)

    @staticmethod
    def _read(path: str) -> str:
        with open(path) as f:
            return f.read()

    def join(self, part: str) -> None:
        """Move the calling process into ``part`` (``job``) of every hierarchy."""
        for ctrl in self.dirs:
            self._write(os.path.join(self.dirs[ctrl], part, "cgroup.procs"), "0")

    def prepare_fast(self, limits: dict, resident_bytes: int = 0, resident_procs: int = 0) -> None:
        """`prepare` without reading the counters (the caller kept them from the last job)."""
        self.prepare(limits, resident_bytes, resident_procs, read_counters=False)

    def usage_bytes(self) -> int:
        """Memory charged to the job cgroup now."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int(self._read(self._job(self._mem_dir(), name)))

    def prepare(self, limits: dict, resident_bytes: int = 0, resident_procs: int = 0, read_counters: bool = True) -> dict:
        """Set the job's limits and reset its counters; returns the counters to diff against.

        ``resident_bytes``/``resident_procs``: what already lives in the cgroup (a supervisor that
        stays there, so that jobs need no cgroup migration) on top of which the job's limits apply.
        """
        memory = str((int(limits["memory_mb"]) << 20) + resident_bytes)
        pids = str(int(limits["processes"]) + 1 + resident_procs)  # + a reaper
        if self.version == 2:
            self._set(self._job("unified", "memory.max"), memory)
            try:
                self._set(self._job("unified", "memory.swap.max"), "0")
            except OSError:
                pass
            self._set(self._job("unified", "pids.max"), pids)
            try:  # kernels >= 6.12 reset the high-water mark on write
                self._write(self._job("unified", "memory.peak"), "reset")
                self.peak_resettable = True
            except OSError:
                self.peak_resettable = False
        else:
            self._set(self._job("memory", "memory.limit_in_bytes"), memory)
            self._write(self._job("memory", "memory.max_usage_in_bytes"), "0")
            self._set(self._job("pids", "pids.max"), pids)
        return {"oom_kill": self.oom_kills(), "cpu_s": self.cpu_s()} if read_counters else {}

    def cpu_s(self):
        """CPU seconds used by every process that was ever in the job cgroup (None if unknown)."""
        try:
            if self.version == 2:
                for line in self._read(self._job("unified", "cpu.stat")).splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return None
            if "cpuacct" not in self.dirs:
                return None
            return int(self._read(self._job("cpuacct", "cpuacct.usage"))) / 1e9
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in self._read(self._job(self._mem_dir(), name)).splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def peak_bytes(self):
        if self.version == 2:
            if not getattr(self, "peak_resettable", False):
                return None
            return int(self._read(self._job("unified", "memory.peak")))
        return int(self._read(self._job("memory", "memory.max_usage_in_bytes")))

    def procs(self) -> list:
        """Pids in the job cgroup (of the pids hierarchy: every job process is in all of them)."""
        ctrl = "unified" if self.version == 2 else ("pids" if "pids" in self.dirs else next(iter(self.dirs)))
        return sorted(int(line) for line in self._read(self._job(ctrl, "cgroup.procs")).split())

    def kill_all(self, exclude: frozenset = frozenset()) -> None:
        """SIGKILL every process in the job cgroup except ``exclude`` (pids in our namespace)."""
        if self.version == 2 and not exclude:
            try:
                self._write(self._job("unified", "cgroup.kill"), "1")
                return
            except OSError:
                pass
        for pid in self.procs():
            if pid in exclude:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- serve mode: the warm supervisor -----------------------------------------------------------

class Supervisor:
    def __init__(self, config: dict, seccomp_program: bytes):
        self.uid = int(config["uid"])
        self.gid = int(config["gid"])
        self.seccomp = SeccompProgram(seccomp_program) if seccomp_program else b""
        self.scratch = config.get("scratch", "/tmp")
        cg = config.get("cgroup")
        self.cgroup = JobCgroup(cg["version"], cg["dirs"]) if cg else None
        # Per-job PID namespaces are needed only when a job cannot get a uid of its own (an
        # unprivileged host: one uid mapped), since then only the namespace keeps it from
        # signalling this supervisor. Otherwise one fork per job is enough: the job runs in this
        # worker's own PID namespace, as another uid, and everything it leaves is killed after it.
        pidns = config.get("job_pid_namespace")
        self.job_pid_namespace = (os.getuid() != 0 or _in_user_namespace()) if pidns is None else bool(pidns)
        with open("/proc/self/statm") as f:
            self.as_base = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        self.resident_step = 8 << 20  # the supervisor's share of the limit is rounded up to this
        self._counters: dict = {}  # oom_kill / cpu_s after the previous job = before the next
        self._compiled = None

    def start(self) -> None:
        prctl(PR_SET_DUMPABLE, 0)
        prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of a job become our children, to be reaped
        if os.getuid() == 0:
            clear_inheritable_capabilities()
        if self.cgroup:
            # the supervisor lives in the job cgroup itself: forks inherit it, so no job pays for a
            # cgroup migration; the job's limits are set on top of what the supervisor uses, and
            # jobs make themselves the OOM killer's first choice
            self.cgroup.join("job")
        # modules most programs import: paid once here instead of in every job
        # (each preloaded module makes every fork a little dearer: typing costs a job ~4 ms to
        # import and HumanEval prompts import it, ast and base64 are what the code grader's
        # driver needs; random/hashlib are left to the jobs that use them)
        import ast, atexit, base64, collections, functools, heapq, io, itertools, math, re, resource, string, threading, traceback, types, typing  # noqa: E401,F401

    def run_job(self, header: dict, blobs: list) -> tuple:
        limits = header["limits"]
        code, stdin = blobs[0], blobs[1]
        names = header.get("files", [])
        files = dict(zip(names, blobs[2:]))
        before = {}
        if self.cgroup:
            # the limit is the job's memory on top of what the supervisor already uses (rounded up,
            # so it is rarely rewritten); the job's peak is measured from what is charged now
            resident = self.cgroup.usage_bytes()
            allowance = (resident // self.resident_step + 1) * self.resident_step  # rarely changes between jobs
            counters = self._counters or self.cgroup.prepare(limits, allowance, 1)
            if self._counters:
                self.cgroup.prepare_fast(limits, allowance, 1)
            before = {**counters, "resident_bytes": resident}
        # a fresh scratch filesystem per job, discarded afterwards: nothing a job writes survives
        # it. (Mounted here rather than in a per-job mount namespace, whose teardown costs
        # milliseconds; jobs cannot mount or unmount anything.)
        scratch_opts = f"size={int(limits['disk_mb'])}m,nr_inodes={int(limits['inodes'])},mode=0700,uid={self.uid},gid={self.gid}"
        mount("tmpfs", self.scratch, "tmpfs", MS_NOSUID | MS_NODEV, scratch_opts)
        try:
            if self.job_pid_namespace:
                return self._run_job(limits, code, stdin, files, before)
            return self._run_direct(limits, code, stdin, files, before)
        finally:
            umount(self.scratch)

    def _run_direct(self, limits, code, stdin, files, before) -> tuple:
        """One fork: the job is our child in this worker's PID namespace, under another uid."""
        self._compiled = precompile(code, os.path.join(self.scratch, "main.py"))
        gc.freeze()  # the job's garbage collections must not walk (and so copy) our objects
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        t0 = time.monotonic()
        job = os.fork()
        if job == 0:
            rc = 125
            try:
                for fd in (w_in, r_out, r_err):
                    os.close(fd)
                rc = self._job(limits, code, files, (r_in, w_out, w_err))
            except BaseException as e:
                try:
                    os.write(w_err, f"sandbox: job setup failed: {type(e).__name__}: {e}\n".encode())
                except OSError:
                    pass
            os._exit(rc)
        for fd in (r_in, w_out, w_err):
            os.close(fd)
        pidfd = os.pidfd_open(job)
        try:
            out, err, total, reason = self._pump(limits, t0, w_in, r_out, r_err, pidfd, stdin)
        finally:
            os.close(pidfd)
        self._kill_everything_but_us()  # the job's leftovers, or the job itself at a limit
        _, status, ru = os.wait4(job, 0)
        while True:  # reap what the job left behind (reparented to us: we are a subreaper)
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        out, err, total = self._drain(r_out, r_err, out, err, total, int(limits["output_bytes"]))
        wall = time.monotonic() - t0
        result = {"limit": reason or ("output_limit" if total > int(limits["output_bytes"]) else None), "output_total": total,
                  "wait_status": status, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss, "wall_s": wall}
        self._cgroup_report(result, before)
        return result, [bytes(out), bytes(err)]

    def _kill_everything_but_us(self) -> None:
        """SIGKILL every process of this worker's PID namespace except its init and us: between
        jobs that is exactly the job's process set. (kill(-1) holds the task list lock, so a fork
        bomb cannot race it.) The job cgroup is killed too where there is one."""
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.cgroup:
            self.cgroup.kill_all(exclude=frozenset({os.getpid()}))

    def _pump(self, limits, t0, w_in, r_out, r_err, pidfd, stdin: bytes):
        """Feed stdin and collect output until the job exits, its wall clock ends or its output
        budget is spent; returns (out, err, total bytes seen, limit hit or None)."""
        deadline = t0 + float(limits["wall_s"])
        budget = int(limits["output_bytes"])
        out, err = bytearray(), bytearray()
        bufs = {r_out: out, r_err: err}
        total, reason = 0, None
        pending = memoryview(stdin)
        poller = select.poll()
        for fd in (r_out, r_err, pidfd):
            poller.register(fd, select.POLLIN)
        if pending:
            os.set_blocking(w_in, False)
            poller.register(w_in, select.POLLOUT)
        else:
            os.close(w_in)
            w_in = -1
        exited = False
        while not exited:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = "timeout"
                break
            for fd, ev in poller.poll(left * 1000):
                if fd == pidfd:
                    exited = True
                elif fd == w_in:
                    try:
                        n = os.write(w_in, pending[:65536])
                        pending = pending[n:]
                    except (BrokenPipeError, BlockingIOError):
                        n = -1
                    if not pending or n < 0 or ev & (select.POLLERR | select.POLLHUP):
                        poller.unregister(w_in)
                        os.close(w_in)
                        w_in = -1
                else:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        poller.unregister(fd)
                        continue
                    bufs[fd] += chunk[: max(0, budget - total)]
                    total += len(chunk)
                    if total > budget:
                        reason = "output_limit"
                        exited = True
        if w_in >= 0:
            os.close(w_in)
        return out, err, total, reason

    @staticmethod
    def _drain(r_out, r_err, out, err, total, budget):
        """Read what the (now dead) job's pipes still hold, within the budget, and close them."""
        for fd, buf in ((r_out, out), (r_err, err)):
            os.set_blocking(fd, False)
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:  # a writer survived somewhere: never wait for it
                    break
                if not chunk:
                    break
                buf += chunk[: max(0, budget - total)]
                total += len(chunk)
            os.close(fd)
        return out, err, total

    def _cgroup_report(self, result: dict, before: dict) -> None:
        if not self.cgroup:
            return
        leftovers = [p for p in self.cgroup.procs() if p != os.getpid()]
        if leftovers:  # cannot happen when the kill above worked: recycle this worker
            self.cgroup.kill_all(exclude=frozenset({os.getpid()}))
            result["anomaly"] = f"{len(leftovers)} processes left in the job cgroup"
        ooms_after, cpu_after = self.cgroup.oom_kills(), self.cgroup.cpu_s()
        self._counters = {"oom_kill": ooms_after, "cpu_s": cpu_after}
        result["oom_kills"] = ooms_after - before.get("oom_kill", 0)
        if cpu_after is not None and before.get("cpu_s") is not None:
            result["cpu_s"] = cpu_after - before["cpu_s"]
        try:
            result["peak_memory_bytes"] = max(0, self.cgroup.peak_bytes() - before.get("resident_bytes", 0))
        except (OSError, ValueError):
            pass

    def _run_job(self, limits, code, stdin, files, before) -> tuple:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        r_err, w_err = os.pipe()
        r_st, w_st = os.pipe()
        self._compiled = precompile(code, os.path.join(self.scratch, "main.py"))
        gc.freeze()
        t0 = time.monotonic()
        reaper = os.fork()
        if reaper == 0:  # never returns
            code_rc = 120
            try:
                for fd in (w_in, r_out, r_err, r_st):
                    os.close(fd)
                self._reaper(limits, code, files, (r_in, w_out, w_err), w_st)
            except BaseException as e:  # report, never raise into the supervisor's loop
                try:
                    os.write(w_st, json.dumps({"reaper_error": f"{type(e).__name__}: {e}"}).encode() + b"\n")
                except OSError:
                    pass
            os._exit(code_rc)
        for fd in (r_in, w_out, w_err, w_st):
            os.close(fd)
        pidfd = os.pidfd_open(reaper)  # readable once the reaper is gone: the job's namespace is empty
        try:
            out, err, total, reason = self._pump(limits, t0, w_in, r_out, r_err, pidfd, stdin)
        finally:
            os.close(pidfd)
        head = b""
        if reason:
            head = _read_available(r_st)  # the reaper's first line: the job's init pid
            first = head.split(b"\n", 1)[0]
            self._kill(json.loads(first).get("job_pid") if first.strip() else None, reaper)
        os.waitpid(reaper, 0)
        lines = [json.loads(x) for x in (head + _read_all(r_st)).split(b"\n") if x.strip()]
        out, err, total = self._drain(r_out, r_err, out, err, total, int(limits["output_bytes"]))
        result = {"limit": reason or ("output_limit" if total > int(limits["output_bytes"]) else None), "output_total": total,
                  "wall_s": time.monotonic() - t0}
        final = next((x for x in lines if "status" in x), None)
        failed = next((x["reaper_error"] for x in lines if "reaper_error" in x), None)
        if final is None and reason and not failed:  # we killed it before it could report
            result.update(wait_status=signal.SIGKILL, cpu_s=0.0, maxrss_kb=None)
        elif final is None:
            result["error"] = failed or "the job's reaper ended without reporting"
        else:
            result.update(wait_status=final["status"], cpu_s=final["cpu_s"], maxrss_kb=final["maxrss_kb"])
        self._cgroup_report(result, before)
        return result, [bytes(out), bytes(err)]

    def _reaper(self, limits, code, files, stdio, w_st) -> None:
        unshare(CLONE_NEWPID)
        init = os.fork()
        if init == 0:  # PID 1 of the job's namespace
            rc = 124
            try:
                rc = self._init(limits, code, files, stdio, w_st)
            except BaseException as e:
                try:
                    os.write(w_st, json.dumps({"reaper_error": f"init: {type(e).__name__}: {e}"}).encode() + b"\n")
                except OSError:
                    pass
            os._exit(rc)
        for fd in stdio:
            os.close(fd)
        # killing this PID 1 kills every process of the job: the supervisor's handle on the job
        os.write(w_st, json.dumps({"job_pid": init}).encode() + b"\n")
        os.close(w_st)
        os.waitpid(init, 0)
        os._exit(0)

    def _init(self, limits, code, files, stdio, w_st) -> int:
        """PID 1 of the job's namespace: starts the job as PID 2 (so it has ordinary signal
        semantics), reaps orphans, reports the job's status, and exits, which makes the kernel
        kill whatever the job left behind."""
        job = os.fork()
        if job == 0:
            rc = 125
            try:
                os.close(w_st)
                rc = self._job(limits, code, files, stdio)
            except BaseException as e:
                try:
                    os.write(2, f"sandbox: job setup failed: {type(e).__name__}: {e}\n".encode())
                except OSError:
                    pass
            os._exit(rc)
        for fd in stdio:
            os.close(fd)
        while True:
            pid, status, ru = os.wait4(-1, 0)
            if pid == job:
                break
        os.write(w_st, json.dumps({"status": status, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss}).encode() + b"\n")
        return 0

    def _job(self, limits, code: bytes, files: dict, stdio) -> int:
        r_in, w_out, w_err = stdio
        os.dup2(r_in, 0)
        os.dup2(w_out, 1)
        os.dup2(w_err, 2)
        os.closerange(3, 1 << 16)
        os.setsid()
        # the job (and all it forks) is the OOM killer's first choice, before the supervisor that
        # shares its cgroup (raising one's own score needs no privilege; lowering would)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        drop_privileges(self.uid, self.gid)
        os.chdir(self.scratch)
        write_files(self.scratch, {**files, "main.py": code})
        set_rlimits(limits, self.as_base, pids_cgroup=self.cgroup is not None)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        lock_down(self.seccomp)
        return run_python_in_process(code, os.path.join(self.scratch, "main.py"), self._compiled)

    def _kill(self, job_pid, reaper) -> None:
        # SIGKILL to the job's PID 1 takes its whole PID namespace with it; the cgroup covers
        # the moment before the reaper has forked it.
        if job_pid:
            try:
                os.kill(job_pid, signal.SIGKILL)
                return
            except ProcessLookupError:
                return
        if self.cgroup:  # killing the reaper too: the result is synthesised from `reason`
            self.cgroup.kill_all(exclude=frozenset({os.getpid()}))
        else:
            os.kill(reaper, signal.SIGKILL)


def _read_available(fd: int) -> bytes:
    """What a pipe holds right now, without waiting."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return b""
    finally:
        os.set_blocking(fd, True)


def _read_all(fd: int) -> bytes:
    """Everything left in a pipe whose writers are gone, then close it."""
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


PRECOMPILE_MAX_BYTES = 64 << 10


def precompile(code: bytes, filename: str):
    """The code object for a small program, compiled in the supervisor before the fork, or None.

    The first compile in a freshly forked child costs about a millisecond of copy-on-write
    faults; compiling here costs tens of microseconds. Compiling runs none of the program, and
    the size cap bounds the parser's memory; any failure just leaves the job to compile (and
    report the error) itself, as ``python3 main.py`` would.
    """
    if len(code) > PRECOMPILE_MAX_BYTES:
        return None
    try:
        return compile(code, filename, "exec", dont_inherit=True)
    except BaseException:
        return None


def run_python_in_process(code: bytes, filename: str, compiled=None) -> int:
    """Run ``code`` as ``__main__`` in this (freshly forked) interpreter; return the exit code the
    same program would have under ``python3 main.py``."""
    import atexit
    import builtins
    import io
    import threading
    import traceback
    import types

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", write_through=False)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
    sys.argv = [filename]
    sys.path[0:0] = [os.path.dirname(filename)]
    main = types.ModuleType("__main__")
    main.__file__ = filename
    main.__builtins__ = builtins
    # keep the supervisor's own __main__ alive under another name: freeing it would make this
    # forked child walk (and so copy) much of the supervisor's memory for nothing
    sys.modules["_rlvr_supervisor_main"] = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rc = 0
    try:
        exec(compiled if compiled is not None else compile(code, filename, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as e:
        rc = _exit_code(e)
    except BaseException:
        traceback.print_exc()
        rc = 1
    try:  # what the interpreter does at exit: join threads, run atexit, flush
        threading._shutdown()
        atexit._run_exitfuncs()
    except SystemExit as e:
        rc = _exit_code(e)
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            rc = rc or 120
    return rc


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def serve() -> None:
    config, blobs = recv_message(0)
    sup = Supervisor(config, blobs[0] if blobs else b"")
    sup.start()
    send_message(1, {"ready": True, "pid": os.getpid(), "uid": os.getuid()})
    served = 0
    while True:
        try:
            header, blobs = recv_message(0)
        except EOFError:
            return
        try:
            result, out = sup.run_job(header, blobs)
        except Exception as e:  # the supervisor itself failed: report it, then let the host recycle us
            result, out = {"error": f"supervisor: {type(e).__name__}: {e}", "anomaly": "supervisor exception"}, [b"", b""]
        served += 1
        send_message(1, {"id": header.get("id"), **result}, out)


# -- oneshot mode: one job, then exec a fresh interpreter --------------------------------------

def oneshot() -> None:
    config, blobs = recv_message(0)
    seccomp_program, code = blobs[0], blobs[1]
    files = dict(zip(config.get("files", []), blobs[2:]))
    limits = config["limits"]
    scratch = config.get("scratch", "/tmp")
    cg = config.get("cgroup")
    if cg:
        JobCgroup(cg["version"], cg["dirs"]).join("job")
    uid, gid = int(config["uid"]), int(config["gid"])
    scratch_opts = f"size={int(limits['disk_mb'])}m,nr_inodes={int(limits['inodes'])},mode=0700,uid={uid},gid={gid}"
    mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV, scratch_opts)
    drop_privileges(uid, gid)
    os.chdir(scratch)
    write_files(scratch, {**files, "main.py": code})
    os.closerange(3, 1 << 16)
    with open("/proc/self/statm") as f:  # the interpreter's own mappings are not the job's budget
        as_base = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    set_rlimits(limits, as_base, pids_cgroup=bool(cg))
    lock_down(seccomp_program)
    python = config["python"]
    os.execv(python, [python, *config.get("flags", ["-s"]), os.path.join(scratch, "main.py")])


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "serve":
        serve()
    elif mode == "oneshot":
        try:
            oneshot()
        except BaseException as e:  # the host turns this into an ERROR execution
            os.write(2, f"sandbox: bootstrap failed: {type(e).__name__}: {e}\n".encode())
            os._exit(120)
    else:
        sys.exit(f"usage: {sys.argv[0]} serve|oneshot")
