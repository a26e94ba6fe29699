"""The remote backend: jobs sent to a sandbox service speaking SandboxFusion's ``run_code`` API.

Request (``POST {url}/run_code``, JSON)::

    {"code": ..., "language": "python", "stdin": ..., "run_timeout": seconds, "compile_timeout": seconds,
     "files": {path: base64 content}, "rlvr_limits": {...}}      # rlvr_limits: our extension

Response: ``{"status": "Success" | "Failed" | "SandboxError", "message": ..., "run_result":
{"status": "Finished" | "Error" | "TimeLimitExceeded", "return_code", "stdout", "stderr",
"execution_time"}}``. A server of this project (`sandboxes.server`, ``rlvr sandbox serve``) also
returns ``rlvr_execution``, the full `Execution` (exact bytes, memory, status), which the client
prefers; against another SandboxFusion server the standard fields are mapped (`from_sandboxfusion`).

An unreachable service, an HTTP error or a malformed answer is an ``ERROR`` execution naming
the URL: never a wrong answer.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from sandboxes.backend import Availability, Backend
from sandboxes.types import Execution, ExecStatus, Job, SandboxError

TOKEN_ENV = "RLVR_SANDBOX_TOKEN"


def to_request(job: Job) -> dict[str, Any]:
    return {
        "code": job.code, "language": "python", "stdin": job.stdin.decode("utf-8", "replace"),
        "run_timeout": job.limits.wall_s, "compile_timeout": job.limits.wall_s,
        "files": {name: base64.b64encode(content).decode() for name, content in job.files.items()},
        "rlvr_limits": job.limits.to_dict(),
        "rlvr_stdin_b64": base64.b64encode(job.stdin).decode(),
    }


def execution_from_dict(d: dict[str, Any], backend: str) -> Execution:
    """An `Execution` from this project's ``rlvr_execution`` extension (bytes as base64)."""
    return Execution(
        status=ExecStatus(d["status"]), exit_code=d.get("exit_code"),
        stdout=base64.b64decode(d.get("stdout_b64", "")), stderr=base64.b64decode(d.get("stderr_b64", "")),
        wall_s=float(d.get("wall_s", 0.0)), cpu_s=float(d.get("cpu_s", 0.0)), peak_memory_bytes=d.get("peak_memory_bytes"),
        backend=backend, info={**dict(d.get("info") or {}), "remote_backend": d.get("backend", "")},
    )


def execution_to_dict(ex: Execution) -> dict[str, Any]:
    return {
        "status": ex.status.value, "exit_code": ex.exit_code, "stdout_b64": base64.b64encode(ex.stdout).decode(),
        "stderr_b64": base64.b64encode(ex.stderr).decode(), "wall_s": ex.wall_s, "cpu_s": ex.cpu_s,
        "peak_memory_bytes": ex.peak_memory_bytes, "backend": ex.backend, "info": ex.info,
    }


def from_sandboxfusion(resp: dict[str, Any], backend: str) -> Execution:
    """Map a standard SandboxFusion ``run_code`` response onto an `Execution`."""
    status = resp.get("status")
    run = resp.get("run_result") or {}
    if status == "SandboxError" or not run:
        return Execution.error(f"remote sandbox error: {resp.get('message') or 'no run_result'}", backend=backend)
    run_status = run.get("status")
    out = (run.get("stdout") or "").encode()
    err = (run.get("stderr") or "").encode()
    wall = float(run.get("execution_time") or 0.0)
    if run_status == "TimeLimitExceeded":
        return Execution(ExecStatus.TIMEOUT, run.get("return_code"), out, err, wall, backend=backend)
    if run_status == "Finished":
        return Execution(ExecStatus.OK, run.get("return_code"), out, err, wall, backend=backend)
    return Execution.error(f"remote sandbox could not run the program ({run_status}): {resp.get('message', '')}", backend=backend)


class RemoteBackend(Backend):
    """A SandboxFusion-compatible service (see the module docstring), on one server or several
    (`rlvr.serve.client.ServerPool`: least outstanding first, retries with backoff on transport
    failures and 503, failover).

    Args:
        url: Base URL, e.g. ``http://sandbox-host:8080``, or several (a list, or commas).
        concurrency: Requests in flight at once for `run_many`.
        timeout_s: Extra seconds allowed past a job's wall limit for the HTTP round trip.
        token: Bearer token sent as ``Authorization`` (default ``$RLVR_SANDBOX_TOKEN``).
    """

    name = "remote"

    def __init__(self, url: str | list[str], concurrency: int = 16, timeout_s: float = 30.0, token: str | None = None):
        from rlvr.serve.client import ServerPool

        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        try:
            self.servers = ServerPool(url, self.token, timeout_s)
        except ValueError as e:
            raise SandboxError(f"remote sandbox {e}") from None
        self.url = self.servers.url

    @classmethod
    def probe(cls, url: str = "") -> Availability:
        if not url:
            return Availability(False, "needs url=... (a SandboxFusion-compatible run_code service, e.g. `rlvr sandbox serve`)")
        return Availability(True)

    def info(self) -> dict[str, Any]:
        return {**super().info(), "url": self.url}

    def run(self, job: Job) -> Execution:
        from rlvr.serve.client import RemoteError

        try:
            data = self.servers.request("POST", "/run_code", to_request(job), timeout_s=job.limits.wall_s + self.timeout_s)
        except RemoteError as e:
            return Execution.error(f"remote sandbox: {e}", backend=self.name)
        if not isinstance(data, dict):
            return Execution.error(f"remote sandbox {self.url} sent {type(data).__name__}, expected an object", backend=self.name)
        try:
            if isinstance(data.get("rlvr_execution"), dict):
                return execution_from_dict(data["rlvr_execution"], self.name)
            return from_sandboxfusion(data, self.name)
        except (KeyError, ValueError, TypeError) as e:
            return Execution.error(f"remote sandbox {self.url} sent a malformed answer: {e}", backend=self.name)
