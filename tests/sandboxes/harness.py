"""Host-side harness for the adversarial suite: bait on the host, an outer guard, and host checks.

`Bait` plants what an escaping program would go for (secret files and an environment variable,
TCP/UDP/DNS/UNIX listeners on loopback, a victim process) and afterwards inspects the *host*:
were files created, connections accepted, datagrams received, the victim killed, processes left
behind, secrets printed. `GuardedRunner` runs the backend in a separate process placed in an
outer cgroup (memory and pids ceilings), so a sandbox that fails cannot take the machine down.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sandboxes import cgroups

JOB_UID = 65534
HERE = Path(__file__).parent
REPO = HERE.parent.parent
GUARD_MEMORY_BYTES = 3 << 30
GUARD_PIDS = 1024


def _listen_udp(port: int) -> socket.socket | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    s.setblocking(False)
    return s


@dataclass
class Bait:
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    def __post_init__(self) -> None:
        t = self.token
        self.secret = f"SECRET-{secrets.token_hex(12)}"
        # /root, world-readable /tmp, and the project tree (under an ignored folder, so a crashed
        # run can never commit it)
        (REPO / ".pytest_cache").mkdir(exist_ok=True)
        self.secret_files = [Path(f"/root/rlvr-secret-{t}.txt"), Path(f"/tmp/rlvr-secret-{t}.txt"), REPO / ".pytest_cache" / f"rlvr-secret-{t}.txt"]
        for p in self.secret_files:
            try:
                p.write_text(self.secret)
                p.chmod(0o644)
            except OSError:
                pass
        self.env_name = f"RLVR_SECRET_{t.upper()}"
        # paths an escaping program would create
        self.write_targets = [Path(f"/tmp/rlvr-pwned-{t}"), Path(f"/root/rlvr-pwned-{t}"), REPO / f"rlvr-pwned-{t}",
                              Path(f"/dev/shm/rlvr-pwned-{t}"), Path(f"/var/tmp/rlvr-pwned-{t}"), Path(f"/usr/lib/rlvr-pwned-{t}")]
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.tcp.setblocking(False)
        self.tcp_port = self.tcp.getsockname()[1]
        self.udp = _listen_udp(0)
        self.udp_port = self.udp.getsockname()[1]
        self.dns = _listen_udp(53)  # may be taken; the DNS attack then still aims at it
        self.unix_path = f"/tmp/rlvr-sock-{t}"
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen(4)
        self.unix.setblocking(False)
        self.abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.abstract.bind(f"\0rlvr-{t}")
        self.abstract.listen(4)
        self.abstract.setblocking(False)
        self.victim = subprocess.Popen(["sleep", "3600"], start_new_session=True)

    def fmt(self, code: str) -> str:
        """Fill an attack template with this bait's names."""
        values = {"token": self.token, "tcp_port": self.tcp_port, "udp_port": self.udp_port, "unix_path": self.unix_path,
                  "victim_pid": self.victim.pid, "env_name": self.env_name, "host_pid": os.getpid(),
                  "secret_paths": [str(p) for p in self.secret_files], "write_targets": [str(p) for p in self.write_targets]}
        for k, v in values.items():
            code = code.replace("{" + k + "}", repr(v) if not isinstance(v, int) else str(v))
        return code

    # -- host checks ------------------------------------------------------------------------

    def breaches(self, outputs: bytes, guard=None) -> list[str]:
        """Everything on the host that shows an escape; empty when the attack was contained.

        ``guard``: the outer guard the backend runs under; processes left running are looked
        for there (and, without one, among every process of the jobs' uid on the host)."""
        found = []
        if self.secret.encode() in outputs:
            found.append("secret leaked into the job's output")
        for p in self.write_targets:
            if p.exists():
                found.append(f"file created on the host: {p}")
                try:
                    p.unlink()
                except OSError:
                    pass
        for name, sock in (("TCP", self.tcp), ("UNIX", self.unix), ("abstract UNIX", self.abstract)):
            try:
                conn, _ = sock.accept()
                conn.close()
                found.append(f"{name} connection reached a host listener")
            except (BlockingIOError, OSError):
                pass
        for name, sock in (("UDP", self.udp), ("DNS", self.dns)):
            if sock is None:
                continue
            try:
                sock.recvfrom(4096)
                found.append(f"{name} datagram reached a host socket")
            except (BlockingIOError, OSError):
                pass
        if self.victim.poll() is not None:
            found.append(f"host victim process {self.victim.pid} was killed")
        left = leftover_job_processes(guard)
        if left:
            found.append(f"job processes alive on the host after the job: {left}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        return found

    def close(self) -> None:
        self.victim.kill()
        self.victim.wait()
        for s in (self.tcp, self.udp, self.dns, self.unix, self.abstract):
            if s is not None:
                s.close()
        for p in [*self.secret_files, Path(self.unix_path)]:
            try:
                p.unlink()
            except OSError:
                pass


def _someone_elses(pid: str, guard) -> bool:
    """Whether a process belongs to another sandbox on this machine (another test run's, another
    engineer's): it sits in an rlvr cgroup that is not under our guard. A process that escaped
    ours sits in no rlvr cgroup at all, so it still counts."""
    try:
        paths = [line.split(":", 2)[2] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    except (OSError, IndexError):
        return False
    ours = guard.name if guard is not None and getattr(guard, "available", False) else None
    in_rlvr = [p for p in paths if "rlvr-" in p]
    return bool(in_rlvr) and (ours is None or not any(ours in p for p in in_rlvr))


def leftover_job_processes(guard=None, wait_s: float = 3.0) -> list[int]:
    """Host pids running as the jobs' uid (other sandboxes' excepted, see `_someone_elses`),
    after giving the kernel ``wait_s`` to reap them."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = []
        for d in Path("/proc").iterdir():
            name = d.name
            if name.isdigit() and not _someone_elses(name, guard):
                try:
                    if d.stat().st_uid == JOB_UID and (d / "status").read_text().split("State:")[1].split()[0] != "Z":
                        pids.append(int(d.name))
                except (OSError, IndexError):
                    pass
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.1)


def guard_procs(dirs) -> list[int]:
    pids: set[int] = set()
    for d in dirs:
        for procs in Path(d).rglob("cgroup.procs"):
            try:
                pids.update(int(x) for x in procs.read_text().split())
            except OSError:
                pass
    return sorted(pids)


class OuterGuard:
    """A cgroup with memory and pids ceilings that the runner (and every sandbox it starts) lives in."""

    def __init__(self) -> None:
        self.support = cgroups.detect()
        self.name = f"rlvr-test-guard-{os.getpid()}-{secrets.token_hex(3)}"
        self.dirs: dict[str, Path] = {}
        if not self.support.available:
            return
        for base in self.support.bases.values():  # empty guards of test runs that died
            for old in base.glob("rlvr-test-guard-*"):
                pid = old.name.split("-")[3]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                    for sub in sorted(old.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [old]:
                        if sub.is_dir():
                            try:
                                sub.rmdir()
                            except OSError:
                                pass
        for ctrl, base in self.support.bases.items():
            d = base / self.name
            d.mkdir(exist_ok=True)
            self.dirs[ctrl] = d
        if self.support.version == 2:
            d = self.dirs["unified"]
            (d / "memory.max").write_text(str(GUARD_MEMORY_BYTES))
            (d / "pids.max").write_text(str(GUARD_PIDS))
        else:
            (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(GUARD_MEMORY_BYTES))
            (self.dirs["pids"] / "pids.max").write_text(str(GUARD_PIDS))

    @property
    def available(self) -> bool:
        return bool(self.dirs)

    def procs(self) -> list[int]:
        """Every process in the guard, in any of its descendant cgroups."""
        return guard_procs(self.dirs.values())

    def add(self, pid: int) -> None:
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(pid))

    def peak_memory(self) -> int | None:
        if self.support.version == 1:
            return int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
        try:
            return int((self.dirs["unified"] / "memory.peak").read_text())
        except OSError:
            return None

    def close(self) -> None:
        for d in self.dirs.values():
            for _ in range(100):
                try:
                    pids = (d / "cgroup.procs").read_text().split()
                    for pid in pids:
                        os.kill(int(pid), signal.SIGKILL)
                    for sub in sorted(d.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                        if sub.is_dir():
                            sub.rmdir()
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


class GuardedRunner:
    """A backend in a subprocess under `OuterGuard` (see guarded_runner.py)."""

    def __init__(self, backend: str, options: dict | None = None, env: dict | None = None, guard=None):
        # a backend whose jobs run elsewhere (Docker: under the engine) brings its own guard
        self.guard = OuterGuard()
        self.job_guard = guard or self.guard
        self.proc = subprocess.Popen([sys.executable, str(HERE / "guarded_runner.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, **(env or {})}, cwd=str(REPO))
        self.guard.add(self.proc.pid)  # before it starts any sandbox: they all inherit the guard
        self.proc.stdin.write(json.dumps({"backend": backend, "options": options or {}}) + "\n")
        self.proc.stdin.flush()
        hello = self.proc.stdout.readline()
        if not hello:
            raise RuntimeError(f"guarded runner for {backend!r} died at start")
        self.info = json.loads(hello)["info"]

    def run(self, code: str, stdin: str = "", limits: dict | None = None) -> dict:
        self.proc.stdin.write(json.dumps({"code": code, "stdin": stdin, "limits": limits or {}}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("guarded runner died (the outer guard may have killed it)")
        out = json.loads(line)
        out["stdout"] = base64.b64decode(out["stdout"])
        out["stderr"] = base64.b64decode(out["stderr"])
        return out

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.guard.close()
