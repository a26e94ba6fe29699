"""A small JSON-over-HTTP server with the guards every rlvr service needs before it runs anything.

In order, for every request but ``GET /health``:

1. **Token**: ``Authorization: Bearer TOKEN`` must match (constant-time compare), else 401.
2. **Size**: a body must declare its ``Content-Length`` and stay within ``max_request_bytes``,
   else 411 / 413. Nothing is read past the headers of a refused request.
3. **Time**: reading the body has ``read_timeout_s``; the handler has ``request_timeout_s`` (a
   handler still running then is answered 504 and abandoned: the work it started is bounded by
   its own limits, e.g. the verifier pool's per-item timeout).
4. **Load**: at most ``max_inflight`` requests run at once, others get 503 at once.

Only then is the JSON parsed (400 when it is not an object) and the route's handler called; an
exception in a handler is a 500 with its one-line reason, never a dead server. The server binds
127.0.0.1 unless told otherwise, and refuses to listen on another address without a token.
"""

from __future__ import annotations

import concurrent.futures as cf
import hmac
import ipaddress
import json
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from envs.threads import DaemonExecutor

Handler = Callable[[dict[str, Any]], dict[str, Any]]
"""A route: the request's JSON object (``{}`` for a GET) to the answer's JSON object."""


class HTTPFailure(Exception):
    """Raised by a handler to answer with ``status`` and ``message`` (e.g. 400 for a bad field)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Guards:
    """The limits of a server (see the module docstring).

    Attributes:
        token: The bearer token every request but ``GET /health`` must carry.
        max_request_bytes: Largest request body.
        read_timeout_s: Seconds to receive a request's headers and body.
        request_timeout_s: Seconds a handler may run before the request is answered 504.
        max_inflight: Requests handled at once.
    """

    token: str
    max_request_bytes: int = 4 << 20
    read_timeout_s: float = 30.0
    request_timeout_s: float = 300.0
    max_inflight: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < 8:
            raise ValueError("token must be a string of at least 8 characters (new_token() makes one)")
        for name in ("max_request_bytes", "read_timeout_s", "request_timeout_s", "max_inflight"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")


def new_token() -> str:
    """A random bearer token."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GuardedServer(ThreadingHTTPServer):
    """Serves ``routes`` (``{("POST", "/verify"): handler, ...}``) behind `Guards`.

    Attributes:
        url: ``http://host:port`` once bound.
        stats: Requests answered, by status code (for tests and ``/health``).
    """

    daemon_threads = True

    def __init__(self, routes: dict[tuple[str, str], Handler], guards: Guards, host: str = "127.0.0.1", port: int = 0,
                 *, name: str = "rlvr", allow_remote: bool = False):
        if not is_loopback(host) and not allow_remote:
            raise ValueError(f"refusing to listen on {host!r}: only loopback addresses unless allow_remote=True "
                             "(`--host 0.0.0.0` on the command line); every request still needs the token")
        self.routes = dict(routes)
        self.guards = guards
        self.name = name
        self.stats: dict[int, int] = {}
        self._stats_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(guards.max_inflight)
        self._executor = DaemonExecutor(guards.max_inflight, f"{name}-request")
        super().__init__((host, port), _make_handler(self))

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def count(self, status: int) -> None:
        with self._stats_lock:
            self.stats[status] = self.stats.get(status, 0) + 1

    def run(self, handler: Handler, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Call ``handler`` within the request time limit; (status, answer)."""
        if not self._slots.acquire(blocking=False):
            return 503, {"error": f"busy: {self.guards.max_inflight} requests in flight; retry later"}
        try:
            future = self._executor.submit(handler, body)
            try:
                return 200, future.result(self.guards.request_timeout_s)
            except cf.TimeoutError:
                return 504, {"error": f"the request did not finish within {self.guards.request_timeout_s:g} s"}
            except HTTPFailure as e:
                return e.status, {"error": str(e)}
            except Exception as e:  # a handler's bug is the request's failure, not the server's
                return 500, {"error": f"{type(e).__name__}: {e}"}
        finally:
            self._slots.release()

    def serve_in_thread(self) -> GuardedServer:
        """Serve from a daemon thread; ``shutdown()`` then ``server_close()`` stops it."""
        threading.Thread(target=self.serve_forever, name=f"{self.name}-server", daemon=True).start()
        return self

    def server_close(self) -> None:
        super().server_close()
        self._executor.shutdown()


def _make_handler(server: GuardedServer) -> type[BaseHTTPRequestHandler]:
    guards = server.guards

    class RequestHandler(BaseHTTPRequestHandler):
        timeout = guards.read_timeout_s  # socket timeout while reading the request
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if status >= 400:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)
            server.count(status)

        def _handle(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            if method == "GET" and path == "/health":
                return self._send(200, {"status": "ok", "server": server.name})
            given = self.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {guards.token}".encode()):
                return self._send(401, {"error": "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')"})
            handler = server.routes.get((method, path))
            if handler is None:
                known = ", ".join(f"{m} {p}" for m, p in sorted(server.routes))
                return self._send(404, {"error": f"no route {method} {path}; routes: {known}"})
            body: dict[str, Any] = {}
            if method == "POST":
                length_header = self.headers.get("Content-Length")
                if length_header is None or not length_header.strip().isdigit():
                    return self._send(411, {"error": "a POST needs a Content-Length header"})
                length = int(length_header)
                if length > guards.max_request_bytes:
                    return self._send(413, {"error": f"request body of {length} bytes is over the limit of {guards.max_request_bytes}"})
                try:
                    raw = self.rfile.read(length)
                except (TimeoutError, OSError):
                    return self._send(408, {"error": f"request body not received within {guards.read_timeout_s:g} s"})
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError as e:
                    return self._send(400, {"error": f"request body is not JSON: {e}"})
                if not isinstance(body, dict):
                    return self._send(400, {"error": f"request body must be a JSON object, got {type(body).__name__}"})
            status, answer = server.run(handler, body)
            self._send(status, answer)

        def do_GET(self) -> None:  # noqa: N802
            self._handle("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._handle("POST")

        def log_message(self, format: str, *args: Any) -> None:  # one line per request is noise at RL rates
            pass

    return RequestHandler
