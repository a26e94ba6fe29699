"""A sandbox service speaking SandboxFusion's ``run_code`` API, backed by any local backend.

Run one per sandbox machine (``rlvr sandbox serve --host 0.0.0.0 --port 8080``) and point many
trainer nodes at it with ``backend="remote", url=...``. Only ``language: python`` is served.
Requests are bounded in size; with a token configured, requests without it get HTTP 401.
"""

from __future__ import annotations

import base64
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sandboxes.backend import Backend
from sandboxes.remote import execution_to_dict
from sandboxes.types import Execution, ExecStatus, Job, Limits, SandboxError

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


def make_server(backend: Backend, host: str = "127.0.0.1", port: int = 8080, token: str | None = None) -> ThreadingHTTPServer:
    """An HTTP server answering ``POST /run_code`` (and ``GET /health``) with ``backend``."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, {"status": "ok", "backend": backend.info()})
            else:
                self._send(404, {"error": "unknown path"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/run_code":
                return self._send(404, {"error": "unknown path; POST /run_code"})
            if token and not hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {token}"):
                return self._send(401, {"error": "missing or wrong bearer token"})
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_REQUEST_BYTES:
                return self._send(413, {"error": f"request body must be 1..{MAX_REQUEST_BYTES} bytes"})
            try:
                req = json.loads(self.rfile.read(length))
            except ValueError as e:
                return self._send(400, {"error": f"invalid JSON: {e}"})
            if not isinstance(req, dict):
                return self._send(400, {"error": "request must be a JSON object"})
            self._send(200, run_code(backend, req))

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise at RL rates
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def serve_in_thread(backend: Backend, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> tuple[ThreadingHTTPServer, str]:
    """Start a server in a daemon thread; returns (server, base url). ``server.shutdown()`` stops it."""
    server = make_server(backend, host, port, token)
    threading.Thread(target=server.serve_forever, name="sandbox-server", daemon=True).start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}"
