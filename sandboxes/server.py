"""A sandbox service speaking SandboxFusion's ``run_code`` API, backed by any local backend.

Run one per sandbox machine (``rlvr sandbox serve --host 0.0.0.0 --port 8080 --token T``) and point
many trainer nodes at it with ``backend="remote", url=...`` (one URL or several). Only ``language:
python`` is served. Requests are bounded in size and number (503 with ``Retry-After`` past them);
with a token configured, requests without it get HTTP 401; without one the server listens on
loopback only.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from sandboxes.backend import Backend
from sandboxes.remote import execution_to_dict
from sandboxes.types import Execution, ExecStatus, Job, Limits, SandboxError

if TYPE_CHECKING:
    from rlvr.serve.http import GuardedServer

MAX_REQUEST_BYTES = 64 << 20


def run_code(backend: Backend, req: dict[str, Any]) -> dict[str, Any]:
    """Answer one ``run_code`` request (a dict) with the backend; never raises."""
    if req.get("language", "python") != "python":
        return {"status": "SandboxError", "message": f"language {req.get('language')!r} is not served (python only)", "run_result": None}
    try:
        if not isinstance(req.get("code"), str):
            raise SandboxError("'code' must be a string")
        limits = Limits.from_dict(req["rlvr_limits"]) if isinstance(req.get("rlvr_limits"), dict) else \
            Limits(wall_s=float(req.get("run_timeout") or 10.0), cpu_s=float(req.get("run_timeout") or 10.0))
        files = {str(k): base64.b64decode(v) for k, v in (req.get("files") or {}).items()}
        stdin = base64.b64decode(req["rlvr_stdin_b64"]) if "rlvr_stdin_b64" in req else (req.get("stdin") or "")
        job = Job.make(req["code"], stdin=stdin, files=files, limits=limits)
    except (SandboxError, ValueError, TypeError) as e:
        return {"status": "SandboxError", "message": f"bad request: {e}", "run_result": None}
    ex = backend.run(job)
    return to_sandboxfusion(ex)


def to_sandboxfusion(ex: Execution) -> dict[str, Any]:
    if ex.status is ExecStatus.ERROR:
        return {"status": "SandboxError", "message": ex.info.get("error", "sandbox error"), "run_result": None,
                "rlvr_execution": execution_to_dict(ex)}
    run_status = "TimeLimitExceeded" if ex.status is ExecStatus.TIMEOUT else "Finished"
    ok = ex.status is ExecStatus.OK and ex.exit_code == 0
    return {
        "status": "Success" if ok else "Failed", "message": "" if ok else ex.status.value,
        "compile_result": None,
        "run_result": {"status": run_status, "execution_time": ex.wall_s, "return_code": ex.exit_code,
                       "stdout": ex.stdout.decode("utf-8", "replace"), "stderr": ex.stderr.decode("utf-8", "replace")},
        "files": {}, "rlvr_execution": execution_to_dict(ex),
    }


def make_server(backend: Backend, host: str = "127.0.0.1", port: int = 8080, token: str | None = None,
                max_inflight: int = 64) -> GuardedServer:
    """A server answering ``POST /run_code`` (and ``GET /health``) with ``backend``, on rlvr's server
    stack (`rlvr.serve.http`: uvicorn, admission control, size limits, graceful drain). Without a
    token it listens on loopback only."""
    from rlvr.serve.http import GuardedServer, Guards

    guards = Guards(token, max_request_bytes=MAX_REQUEST_BYTES, max_inflight=max_inflight, request_timeout_s=3600.0)
    return GuardedServer({("POST", "/run_code"): lambda req: run_code(backend, req)}, guards, host, port,
                         name="rlvr-sandbox", allow_remote=True, health=lambda: {"backend": backend.info()})


def serve_in_thread(backend: Backend, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> tuple[GuardedServer, str]:
    """Start a server in a daemon thread; returns (server, base url). ``server.shutdown()`` stops it."""
    server = make_server(backend, host, port, token).serve_in_thread()
    return server, server.url
