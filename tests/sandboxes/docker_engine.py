"""A real Docker engine for the Docker backend's tests, and a base image from a local root filesystem.

No registry is reachable from CI, so the base image is imported from a root filesystem made of
this machine's own Debian Python (its binary, shared libraries and standard library). The engine
is Debian's ``dockerd`` started with flags that need no bridge or iptables (containers run with
``--network none`` anyway), with its data in a temporary directory, and stopped afterwards.
Everything that cannot work here raises `EngineUnavailable` with the reason, for a clean skip.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from sandboxes.cgroups import remove_stale_trees, remove_tree

BASE_IMAGE = "rlvr-sandbox-rootfs:local"
SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__pycache__", "dist-packages", "site-packages"}


class EngineUnavailable(RuntimeError):
    pass


def _ldd(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            libs.append(path)
    return libs


def rootfs_tar(python: str = "/usr/bin/python3") -> bytes:
    """A minimal root filesystem holding ``python`` (resolved), its libraries and stdlib."""
    real = os.path.realpath(python)
    version = Path(real).name.replace("python", "")  # e.g. "3.11"
    stdlib = Path(f"/usr/lib/python{version}")
    if not Path(real).exists() or not stdlib.is_dir():
        raise EngineUnavailable(f"no system Python with a standard library at {stdlib} to build a root filesystem from")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add_file(src: str, dest: str | None = None) -> None:
            tar.add(os.path.realpath(src), arcname=(dest or src).lstrip("/"), recursive=False)

        for d in ("tmp", "etc", "usr/bin", "bin", "proc", "dev", "sys"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        add_file(real, f"/usr/bin/{Path(real).name}")
        link = tarfile.TarInfo("usr/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, Path(real).name
        tar.addfile(link)
        libs = set(_ldd(real))
        for ext in (stdlib / "lib-dynload").glob("*.so"):  # ctypes needs libffi, ssl libssl, ...
            libs.update(_ldd(str(ext)))
        for lib in sorted(libs):
            add_file(lib)
        for root, dirs, files in os.walk(stdlib):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for f in files:
                add_file(os.path.join(root, f))
        passwd = b"root:x:0:0::/root:/bin/false\nnobody:x:65534:65534:nobody:/tmp:/bin/false\n"
        info = tarfile.TarInfo("etc/passwd")
        info.size = len(passwd)
        tar.addfile(info, io.BytesIO(passwd))
    return buf.getvalue()


GUARD_PREFIX = "rlvr-docker-guard"
CGROUPS = Path("/sys/fs/cgroup")


class RootGuard:
    """The outer guard for containers: a cgroup (memory, pids) at the top of each v1 hierarchy,
    used as dockerd's ``--cgroup-parent`` so every container lives inside it."""

    def __init__(self, name: str, memory_bytes: int, pids: int) -> None:
        self.name = name
        self.dirs = {c: Path(f"/sys/fs/cgroup/{c}") / name for c in ("memory", "pids")}
        if not all(d.parent.is_dir() for d in self.dirs.values()):
            self.dirs = {}
            return
        for d in self.dirs.values():
            d.mkdir(exist_ok=True)
        (self.dirs["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
        (self.dirs["pids"] / "pids.max").write_text(str(pids))

    @property
    def available(self) -> bool:
        return bool(self.dirs)

    def peak_memory(self) -> int | None:
        return int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text()) if self.dirs else None

    def procs(self) -> list[int]:
        from harness import guard_procs

        return guard_procs(self.dirs.values())

    def close(self) -> None:
        """Remove the guard in every v1 hierarchy: dockerd makes its containers' cgroups under the parent in each one
        (cpu, cpuacct, blkio, ...), not only in the two the guard limits."""
        if self.dirs:
            for top in CGROUPS.glob(f"*/{self.name}"):
                remove_tree(top)

    @staticmethod
    def remove_stale(prefix: str) -> None:
        """Remove the guards named ``PREFIX-PID`` of test processes that are gone (a killed run's leave them)."""
        remove_stale_trees(CGROUPS.iterdir(), prefix)


class Engine:
    """A dockerd of our own on a private socket, its containers under `RootGuard`."""

    def __init__(self, guard_memory_bytes: int = 3 << 30, guard_pids: int = 1024) -> None:
        self.proc: subprocess.Popen | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="rlvr-docker-"))
        self.url = f"unix://{self.dir}/docker.sock"
        if os.geteuid() != 0:
            raise EngineUnavailable("starting a Docker engine needs root")
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise EngineUnavailable("dockerd not installed (apt-get install docker.io)")
        RootGuard.remove_stale(GUARD_PREFIX)
        self.guard = RootGuard(f"{GUARD_PREFIX}-{os.getpid()}", guard_memory_bytes, guard_pids)
        if not self.guard.available:
            raise EngineUnavailable("no cgroup v1 memory/pids hierarchies to put the containers under an outer guard")
        self.log = open(self.dir / "dockerd.log", "wb")
        self.proc = subprocess.Popen(
            [dockerd, "--host", self.url, "--data-root", str(self.dir / "data"), "--exec-root", str(self.dir / "exec"),
             "--pidfile", str(self.dir / "docker.pid"), "--bridge=none", "--iptables=false", "--ip6tables=false",
             "--ip-forward=false", "--ip-masq=false", f"--cgroup-parent=/{self.guard.name}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        import docker

        deadline = time.monotonic() + 60
        while True:
            try:
                self.client = docker.DockerClient(base_url=self.url)
                self.client.ping()
                break
            except Exception as e:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (self.dir / "dockerd.log").read_bytes()[-800:].decode(errors="replace")
                    self.close()
                    raise EngineUnavailable(f"dockerd did not start ({e}); its log ends: {tail}") from e
                time.sleep(0.5)

    def import_base(self) -> str:
        """Import the root filesystem as `BASE_IMAGE` (once)."""
        import docker

        try:
            self.client.images.get(BASE_IMAGE)
        except docker.errors.ImageNotFound:
            repo, tag = BASE_IMAGE.split(":")
            self.client.api.import_image_from_data(rootfs_tar(), repository=repo, tag=tag)
        return BASE_IMAGE

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        subprocess.run(["umount", "-R", "-l", str(self.dir)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.guard.close()




_shared: dict = {}


def shared_engine() -> tuple[Engine, str]:
    """One engine and base image per test process, shared by every test directory; stopped at exit.
    Raises `EngineUnavailable` (remembered, so later callers skip at once)."""
    if "error" in _shared:
        raise EngineUnavailable(_shared["error"])
    if "engine" not in _shared:
        try:
            import docker  # noqa: F401
        except ImportError as e:
            _shared["error"] = "the docker SDK is not installed"
            raise EngineUnavailable(_shared["error"]) from e
        try:
            engine = Engine()
        except EngineUnavailable as e:
            _shared["error"] = str(e)
            raise
        try:
            base = engine.import_base()
        except Exception as e:
            engine.close()
            _shared["error"] = f"could not import a base image from a local root filesystem: {e}"
            raise EngineUnavailable(_shared["error"]) from e
        atexit.register(engine.close)
        _shared["engine"], _shared["base"] = engine, base
    return _shared["engine"], _shared["base"]


@pytest.fixture(scope="session")
def docker_options():
    """Options for the docker backend against a real engine started for the tests (skips with
    the reason where that is impossible)."""
    try:
        engine, base = shared_engine()
    except EngineUnavailable as e:
        pytest.skip(f"no Docker engine: {e}")
    return {"base_url": engine.url, "base": base, "guard": engine.guard}
