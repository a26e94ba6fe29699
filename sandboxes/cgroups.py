"""Host-side cgroup management: one cgroup per sandbox worker, with a ``job`` child for its jobs.

Layout, in every hierarchy used (cgroup v1: ``memory``, ``pids`` and, for CPU time, ``cpuacct``;
v2: the unified tree)::

    <our own cgroup>/rlvr-sandbox-<host pid>/<worker>        ceiling for the whole worker
                                                    /job     the supervisor and its current job
                                                             (job limits reset for every job)

The worker directory is bind-mounted read-write into the worker's sandbox so the supervisor can
set each job's limits and read its counters (the per-process backend's bootstrap joins ``job``);
jobs run as an unprivileged uid that cannot write these root-owned files. Everything is created below the cgroup the host process
already lives in, so outer limits (a CI runner's, a container's) still apply.

`detect()` says whether cgroups can be used here and, if not, why.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

V1_CONTROLLERS = ("memory", "pids")


@dataclass(frozen=True)
class CgroupSupport:
    """What this host offers.

    Attributes:
        version: 1 or 2 (0 when unavailable).
        bases: Controller name (``memory``/``pids``, or ``unified`` for v2) -> the directory under
            which this process may create cgroups.
        reason: Why cgroups are unavailable (empty when available).
    """

    version: int
    bases: dict[str, Path] = field(default_factory=dict)
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.version in (1, 2)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) for every cgroup mount, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            parts, post_parts = pre.split(), post.split()
            if len(post_parts) >= 3 and post_parts[0] in ("cgroup", "cgroup2"):
                found.append((parts[4], post_parts[0], set(post_parts[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """Controller (or ``""`` for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    return paths


def detect() -> CgroupSupport:
    """Find writable memory and pids controllers (v1 first where it has them, else v2)."""
    if os.geteuid() != 0:
        return CgroupSupport(0, reason="not root: cgroups need root or a delegated subtree (systemd-run --user --scope -p Delegate=yes)")
    try:
        mounts, own = _mounts(), _own_paths()
    except OSError as e:
        return CgroupSupport(0, reason=f"cannot read /proc/self/mountinfo or /proc/self/cgroup: {e}")
    v1 = {}
    for mnt, fstype, opts in mounts:
        for ctrl in V1_CONTROLLERS:
            if fstype == "cgroup" and ctrl in opts and ctrl in own:
                v1[ctrl] = Path(mnt) / own[ctrl].lstrip("/")
    if set(v1) == set(V1_CONTROLLERS):
        for mnt, fstype, opts in mounts:  # optional: CPU time of a job's whole process tree
            if fstype == "cgroup" and "cpuacct" in opts and "cpuacct" in own:
                v1["cpuacct"] = Path(mnt) / own["cpuacct"].lstrip("/")
        bad = [str(p) for p in v1.values() if not os.access(p, os.W_OK)]
        if bad:
            return CgroupSupport(0, reason=f"cgroup v1 directories not writable: {', '.join(bad)}")
        return CgroupSupport(1, v1)
    unified = next((Path(m) for m, t, _ in mounts if t == "cgroup2"), None)
    if unified is None:
        missing = sorted(set(V1_CONTROLLERS) - set(v1))
        return CgroupSupport(0, reason=f"no cgroup v2 mount and cgroup v1 lacks {missing}")
    base = unified / own.get("", "/").lstrip("/")
    try:
        available = (unified / "cgroup.controllers").read_text().split()
    except OSError as e:
        return CgroupSupport(0, reason=f"cannot read {unified}/cgroup.controllers: {e}")
    if not {"memory", "pids"} <= set(available):
        return CgroupSupport(0, reason=f"cgroup v2 at {unified} lacks the memory/pids controllers (have: {available or 'none'}); they are bound to cgroup v1 hierarchies or disabled")
    if not os.access(base, os.W_OK):
        return CgroupSupport(0, reason=f"cgroup v2 directory {base} is not writable")
    return CgroupSupport(2, {"unified": base})


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class WorkerCgroups:
    """The cgroup tree of one sandbox worker (see the module docstring).

    Args:
        support: From `detect()`.
        name: A name unique among this process's workers.
        memory_mb: Ceiling for the whole worker (supervisor + job), in MiB.
    """

    def __init__(self, support: CgroupSupport, name: str, memory_mb: int):
        if not support.available:
            raise OSError(f"cgroups unavailable: {support.reason}")
        self.support = support
        self.dirs: dict[str, Path] = {}
        group = f"rlvr-sandbox-{os.getpid()}"
        for ctrl, base in support.bases.items():
            top = base / group
            worker = top / name
            for attempt in range(20):
                try:
                    for d in (top, worker, worker / "job"):
                        d.mkdir(exist_ok=True)
                        if support.version == 2 and d in (top, worker):
                            self._enable_v2(d)
                    break
                except (FileExistsError, FileNotFoundError):
                    # another worker's destroy() removed the shared parent just now: again
                    if attempt == 19:
                        raise
            self.dirs[ctrl] = worker
        self._limit_worker(memory_mb)

    @staticmethod
    def _enable_v2(d: Path) -> None:
        try:
            _write(d / "cgroup.subtree_control", "+memory +pids")
        except OSError as e:
            if e.errno == errno.EBUSY:
                raise OSError(f"cannot enable memory/pids controllers in {d}: it holds processes (cgroup v2 'no internal processes' rule); run under a cgroup of your own") from e
            raise

    def _limit_worker(self, memory_mb: int) -> None:
        limit = str(memory_mb << 20)
        if self.support.version == 2:
            _write(self.dirs["unified"] / "memory.max", limit)
        else:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", limit)

    def cpu_seconds(self) -> float | None:
        """CPU seconds used so far by every process that has been in this worker's cgroup."""
        try:
            if self.support.version == 2:
                for line in (self.dirs["unified"] / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return None
            if "cpuacct" in self.dirs:
                return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        except OSError:
            pass
        return None

    def sandbox_dirs(self, mount_root: str = "/run/rlvr-cgroup") -> dict[str, str]:
        """Controller -> the path where the worker's directory appears inside the sandbox."""
        return {ctrl: f"{mount_root}/{ctrl}" for ctrl in self.dirs}

    def binds(self, mount_root: str = "/run/rlvr-cgroup") -> list[tuple[str, str]]:
        """(host path, sandbox path) pairs to bind read-write into the sandbox."""
        inside = self.sandbox_dirs(mount_root)
        return [(str(self.dirs[c]), inside[c]) for c in self.dirs]

    def procs(self, part: str = "") -> list[int]:
        """Host pids in the worker's cgroups (``part`` = ``job``, or all)."""
        pids: set[int] = set()
        for d in self.dirs.values():
            for sub in ([part] if part else ["job", ""]):
                try:
                    pids.update(int(x) for x in (d / sub / "cgroup.procs").read_text().split())
                except OSError:
                    pass
        return sorted(pids)

    def kill(self, part: str = "") -> None:
        """SIGKILL every process in ``part`` (or the whole worker), scoped by the cgroup."""
        if self.support.version == 2:
            target = self.dirs["unified"] / part if part else self.dirs["unified"]
            try:
                _write(target / "cgroup.kill", "1")
                return
            except OSError:
                pass
        for _ in range(50):  # v1 has no cgroup.kill: kill what is listed until nothing is
            pids = self.procs(part)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)

    def destroy(self) -> None:
        """Kill what is left and remove the directories (children first)."""
        self.kill()
        for d in self.dirs.values():
            for sub in ("job", ""):
                for _ in range(100):
                    try:
                        (d / sub).rmdir() if sub else d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.01)  # the last processes are still exiting
            try:
                d.parent.rmdir()  # the per-host-process group, once its last worker is gone
            except OSError:
                pass


def remove_stale(support: CgroupSupport) -> int:
    """Remove ``rlvr-sandbox-<pid>`` trees left by host processes that no longer exist."""
    return remove_stale_trees(support.bases.values(), "rlvr-sandbox")


def remove_stale_trees(bases: Iterable[Path], prefix: str) -> int:
    """Remove the ``PREFIX-<pid>`` trees under each of ``bases`` whose process no longer exists; how many went."""
    removed = 0
    for base in bases:
        for top in base.glob(f"{prefix}-*"):
            pid = top.name.rsplit("-", 1)[1]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            remove_tree(top)
            removed += not top.exists()
    return removed


def remove_tree(top: Path) -> None:
    """``rmdir`` the cgroup ``top`` and every cgroup under it, deepest first (one that still holds a process stays)."""
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
        try:
            d.rmdir()
        except OSError:
            pass
