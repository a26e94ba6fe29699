"""The Docker backend: warm containers (one per core) reused with ``docker exec``, via the SDK.

Each container runs the image built from ``sandboxes/docker_image/`` with no network, a
read-only root, no capabilities, ``no-new-privileges``, the same seccomp policy as the other
backends (`seccomp_profile`), pids and memory limits, an unprivileged user and a size-limited
tmpfs ``/tmp``. A job is one ``docker exec`` of the image's bootstrap, which empties ``/tmp``,
writes the job's files, sets rlimits and ``exec``s ``python3 main.py``.

The host enforces the wall clock and the output budget while reading the exec's stream; a job
that hits either, or leaves a process behind, costs its container (killed with everything in
it: the container's cgroup is the job's process set) and a fresh one replaces it. An unreachable
engine or a failed exec is an ``ERROR`` execution.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from sandboxes import _worker, seccomp, waiting
from sandboxes.backend import Availability, Backend
from sandboxes.outcome import classify, signal_name
from sandboxes.types import Execution, ExecStatus, Job, SandboxError

IMAGE_DIR = Path(__file__).parent / "docker_image"
DEFAULT_IMAGE = "rlvr-sandbox:latest"
LABEL = "rlvr.sandbox"
IDLE_COMMAND = ["python3", "-S", "-c", "import signal\nwhile True: signal.pause()"]
BOOTSTRAP = ["python3", "-s", "-S", "/opt/rlvr/bootstrap.py"]


def seccomp_profile() -> dict[str, Any]:
    """`sandboxes.seccomp`'s policy as a Docker seccomp profile (JSON), for runc to compile."""
    rules: list[dict[str, Any]] = [{"names": list(seccomp.DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38})  # ENOSYS: libc falls back to clone
    flags = [1 << b for b in range(32) if seccomp.CLONE_NAMESPACE_FLAGS & (1 << b)]
    for flag in flags:  # one rule per namespace flag: (flags & flag) == flag -> EPERM
        rules.append({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
                      "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]})
    return {"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"], "syscalls": rules}


def _client(base_url: str | None):
    import docker  # the SDK: imported only when this backend is used

    return docker.DockerClient(base_url=base_url) if base_url else docker.from_env()


class DockerBackend(Backend):
    """Warm Docker containers (see the module docstring).

    Args:
        image: Image to run; built from ``sandboxes/docker_image`` when missing (needs ``base``
            or a reachable registry for its default base).
        base: Base image for that build (e.g. an image imported from a local root filesystem).
        containers: Warm containers (default: the number of CPU cores).
        base_url: Docker engine address (default: ``$DOCKER_HOST`` or the local socket).
        memory_mb / pids / tmp_mb: Container limits (jobs also get rlimits from their `Limits`).
        recycle_after: Replace a container after this many jobs.
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, base: str | None = None, containers: int | None = None, base_url: str | None = None,
                 memory_mb: int = 1024, pids: int = 128, tmp_mb: int = 128, recycle_after: int = 200):
        self.client = _client(base_url)
        self.image = image
        self.base = base
        self.concurrency = containers or os.cpu_count() or 1
        self.memory_mb, self.pids, self.tmp_mb = memory_mb, pids, tmp_mb
        self.recycle_after = recycle_after
        self._profile = json.dumps(seccomp_profile())
        self._idle: queue.Queue[dict[str, Any]] = queue.Queue()
        for i in range(self.concurrency):
            self._idle.put({"index": i, "container": None, "served": 0})
        self._closed = False
        self._lock = threading.Lock()
        self.ensure_image()

    @classmethod
    def probe(cls, base_url: str = "") -> Availability:
        try:
            import docker  # noqa: F401
        except ImportError:
            return Availability(False, "the docker SDK is not installed (pip install docker)")
        try:
            client = _client(base_url or None)
            client.ping()
            client.close()
        except Exception as e:
            where = base_url or os.environ.get("DOCKER_HOST") or "the default socket"
            return Availability(False, f"no Docker engine reachable at {where}: {type(e).__name__}: {str(e)[:200]}")
        return Availability(True)

    def ensure_image(self) -> None:
        """Build ``self.image`` from ``sandboxes/docker_image`` unless it exists."""
        import docker

        try:
            self.client.images.get(self.image)
            return
        except docker.errors.ImageNotFound:
            pass
        buildargs = {"BASE": self.base} if self.base else {}
        try:
            self.client.images.build(path=str(IMAGE_DIR), tag=self.image, buildargs=buildargs, rm=True, pull=False)
        except docker.errors.DockerException as e:
            raise SandboxError(f"could not build the sandbox image {self.image!r} from {IMAGE_DIR}: {e}; pass base=... naming a "
                               "local image with python3 (e.g. one imported from a root filesystem)") from e

    def info(self) -> dict[str, Any]:
        return {**super().info(), "image": self.image, "memory_mb": self.memory_mb, "pids": self.pids}

    # -- containers -----------------------------------------------------------------------

    def _start(self) -> Any:
        return self.client.containers.run(
            self.image, IDLE_COMMAND, detach=True, network_mode="none", read_only=True, cap_drop=["ALL"],
            security_opt=["no-new-privileges", f"seccomp={self._profile}"], pids_limit=self.pids,
            # the idle PID 1 is root without capabilities; jobs are exec'd as 65534, so they
            # cannot signal it, and on the host anything left running as 65534 is a job's
            mem_limit=f"{self.memory_mb}m", memswap_limit=f"{self.memory_mb}m", user="0:0", ipc_mode="private",
            tmpfs={"/tmp": f"size={self.tmp_mb}m,mode=1777"}, labels={LABEL: str(os.getpid())}, environment={"HOME": "/tmp"},
        )

    def _discard(self, slot: dict[str, Any]) -> None:
        c, slot["container"], slot["served"] = slot["container"], None, 0
        if c is not None:
            try:
                c.remove(force=True)  # SIGKILL to everything in the container's cgroup, then delete
            except Exception:
                pass

    def run(self, job: Job) -> Execution:
        if self._closed:
            raise SandboxError("this sandbox backend was closed")
        slot = self._idle.get()
        try:
            if slot["container"] is None:
                try:
                    slot["container"] = self._start()
                except Exception as e:
                    return Execution.error(f"could not start a sandbox container: {type(e).__name__}: {e}", backend=self.name)
            try:
                ex, recycle = self._exec(slot["container"], job)
            except Exception as e:  # the engine failed under us
                ex, recycle = Execution.error(f"docker exec failed: {type(e).__name__}: {e}", backend=self.name), True
            slot["served"] += 1
            if not recycle and self._leftovers(slot["container"]):
                recycle = True
                ex.info["leftover_processes"] = True
            if recycle or slot["served"] >= self.recycle_after:
                self._discard(slot)
            return ex
        finally:
            self._idle.put(slot)

    def _leftovers(self, container: Any) -> bool:
        """Whether anything but the idle PID 1 still runs in the container."""
        try:
            top = self.client.api.top(container.id)
        except Exception:
            return True
        return len(top.get("Processes") or []) > 1

    def _exec(self, container: Any, job: Job) -> tuple[Execution, bool]:
        lim = job.limits
        names = list(job.files)
        message = _worker.encode_message({"limits": lim.to_dict(), "files": names}, [job.code.encode(), *[job.files[n] for n in names]])
        exec_id = self.client.api.exec_create(container.id, BOOTSTRAP, stdin=True, stdout=True, stderr=True, user="65534:65534")["Id"]
        sock = self.client.api.exec_start(exec_id, socket=True)
        raw: socket.socket = getattr(sock, "_sock", sock)
        t0 = time.monotonic()
        feeder = threading.Thread(target=_send_and_close, args=(raw, message + job.stdin), daemon=True)
        feeder.start()
        out, err, total, limit_hit = _read_frames(raw, t0 + lim.wall_s, lim.output_bytes)
        wall = time.monotonic() - t0
        try:
            raw.close()
        except OSError:
            pass
        if limit_hit:
            status = classify(limits=lim, limit_hit=limit_hit, exit_code=-signal.SIGKILL, cpu_s=0.0)
            return Execution(status, -signal.SIGKILL, out, err, wall, backend=self.name, info={"signal": "SIGKILL"}), True
        exit_code = None
        for _ in range(50):  # the stream closes a moment before the engine records the exit code
            state = self.client.api.exec_inspect(exec_id)
            if not state.get("Running"):
                exit_code = state.get("ExitCode")
                break
            time.sleep(0.02)
        if exit_code is None:
            return Execution.error("docker exec did not report an exit code", backend=self.name), True
        if b"sandbox: bootstrap failed" in err[:200]:
            return Execution.error(f"sandbox bootstrap failed in the container: {err.decode(errors='replace')[-300:]}", backend=self.name), True
        if exit_code > 128 and exit_code - 128 < signal.NSIG:  # a signal death, as the engine reports it
            exit_code = -(exit_code - 128)
        status = classify(limits=lim, limit_hit=None, exit_code=exit_code, cpu_s=0.0, stderr=err)
        info: dict[str, Any] = {}
        if signal_name(exit_code):
            info["signal"] = signal_name(exit_code)
        return Execution(status, exit_code, out, err, wall, backend=self.name, info=info), status is not ExecStatus.OK

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:
            try:
                slot = self._idle.get_nowait()
            except queue.Empty:
                break
            self._discard(slot)
        try:
            self.client.close()
        except Exception:
            pass


def _send_and_close(raw: socket.socket, data: bytes) -> None:
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _read_frames(raw: socket.socket, deadline: float, budget: int) -> tuple[bytes, bytes, int, str | None]:
    """Demultiplex Docker's attach stream (8-byte headers: stream id, size) until EOF, the
    deadline or the output budget."""
    buf = bytearray()
    out, err = bytearray(), bytearray()
    total = 0
    raw.setblocking(False)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(out), bytes(err), total, "timeout"
        ready = waiting.ready([raw.fileno()], left)
        if not ready:
            continue
        try:
            chunk = raw.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if chunk:
            buf += chunk
        while len(buf) >= 8:
            stream, size = buf[0], struct.unpack(">I", bytes(buf[4:8]))[0]
            if len(buf) < 8 + size:
                break
            payload = bytes(buf[8:8 + size])
            del buf[:8 + size]
            target = out if stream == 1 else err
            target += payload[: max(0, budget - total)]
            total += len(payload)
            if total > budget:
                return bytes(out), bytes(err), total, "output_limit"
        if not chunk:
            return bytes(out), bytes(err), total, None
