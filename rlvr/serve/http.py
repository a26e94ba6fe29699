"""JSON-over-HTTP servers with the guards every rlvr service needs, on uvicorn and Starlette.

In order, for every request but ``GET /health``:

1. **Token**: ``Authorization: Bearer TOKEN`` must match (constant-time compare), else 401.
2. **Route**: an unknown method or path is a 404 naming the routes.
3. **Load**: at most ``max_inflight`` handlers run at once and ``max_queued`` more wait for a turn;
   a request past both is answered 503 with ``Retry-After`` at once (admission control: never a
   reset connection, never a queue that grows without bound).
4. **Size**: a body must declare its ``Content-Length`` and stay within ``max_request_bytes``,
   else 411 / 413.
5. **Time**: reading the body has ``read_timeout_s`` (408); the handler has ``request_timeout_s``
   (504: the handler is abandoned, the work it started is bounded by its own limits, e.g. the
   verifier pool's per-item timeout).

Only then is the JSON parsed (400 when it is not an object, or nested too deeply to parse) and the
route's handler called in a worker thread (a `RawRoute` gets the body's bytes and the query
parameters instead, e.g. a chunk of weights); an exception in a handler is a 500 with its one-line
reason, never a dead server. A refused request is answered at once and the rest of its body read
and dropped (up to ``DRAIN_LIMIT_BYTES``; past that the connection closes), so a client still
sending it reads the status instead of a broken pipe; when the client said ``Connection: close``
the body is dropped before the answer (within ``read_timeout_s``), since the server then closes at once.

The listening socket is bound in the constructor (``url`` is known at once, port 0 picks a free
port) with a backlog of ``LISTEN_BACKLOG``, so hundreds of clients connecting at once wait in the
kernel's queue instead of being reset. ``serve_forever()`` in the main thread drains on SIGTERM or
SIGINT: in-flight requests finish, new connections are refused, then it returns. The server binds
127.0.0.1 unless told otherwise, and refuses to listen on another address without ``allow_remote``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import hmac
import ipaddress
import json
import logging
import secrets
import signal
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from envs.threads import DaemonExecutor

Handler = Callable[[dict[str, Any]], dict[str, Any]]
"""A route: the request's JSON object (``{}`` for a GET) to the answer's JSON object."""


@dataclass(frozen=True)
class RawRoute:
    """A route whose body is not JSON: ``handler(body bytes, query parameters)`` to the answer's JSON
    object (the same guards apply: token, size, time, admission)."""

    handler: Callable[[bytes, dict[str, str]], dict[str, Any]]

LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the server accepts them (the standard library's server kept 5)."""

DRAIN_LIMIT_BYTES = 64 << 20
"""A refused request's body is read and dropped up to this size before answering; past it the connection closes."""

RETRY_AFTER_S = 1
"""What a 503 tells the client to wait (seconds); rlvr's client adds jitter."""


class HTTPFailure(Exception):
    """Raised by a handler to answer with ``status`` and ``message`` (e.g. 400 for a bad field)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Guards:
    """The limits of a server (see the module docstring).

    Attributes:
        token: The bearer token every request but ``GET /health`` must carry; None for a server
            without one (refused on any address but loopback).
        max_request_bytes: Largest request body.
        read_timeout_s: Seconds to receive a request's body.
        request_timeout_s: Seconds a handler may run before the request is answered 504.
        max_inflight: Requests handled at once.
        max_queued: Requests waiting for one of those slots (their wait counts toward
            ``request_timeout_s``); past both, 503 with ``Retry-After``.
    """

    token: str | None
    max_request_bytes: int = 4 << 20
    read_timeout_s: float = 30.0
    request_timeout_s: float = 300.0
    max_inflight: int = 64
    max_queued: int = 1024

    def __post_init__(self) -> None:
        if self.token is not None and (not isinstance(self.token, str) or len(self.token) < 8):
            raise ValueError("token must be a string of at least 8 characters (new_token() makes one)")
        if not (isinstance(self.max_queued, int) and self.max_queued >= 0):
            raise ValueError(f"max_queued must be an integer >= 0, got {self.max_queued!r}")
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


def bind_listener(host: str, port: int, backlog: int = LISTEN_BACKLOG) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv4 or IPv6) with ``backlog``."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be 0..65535 (0 picks a free one), got {port!r}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto IPPROTO_TCP: asyncio sets TCP_NODELAY only on sockets that say so, and without it every
    # answer (headers, then body) waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.setblocking(False)
    return sock


class _Reply(Exception):
    """Answer the request now with ``status`` and ``payload`` (inside the ASGI app)."""

    def __init__(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None):
        self.status, self.payload, self.headers = status, payload, headers or {}


class GuardedServer:
    """Serves ``routes`` (``{("POST", "/verify"): handler, ...}``) behind `Guards` (uvicorn, Starlette).

    Attributes:
        url: ``http://host:port`` (bound in the constructor).
        stats: Requests answered, by status code (for tests and benchmarks).
        admitted: Requests admitted now (running or waiting for a slot).
    """

    def __init__(self, routes: dict[tuple[str, str], Handler | RawRoute], guards: Guards, host: str = "127.0.0.1", port: int = 0,
                 *, name: str = "rlvr", allow_remote: bool = False, health: Callable[[], dict[str, Any]] | None = None):
        if not is_loopback(host) and not allow_remote:
            raise ValueError(f"refusing to listen on {host!r}: only loopback addresses unless allowed (--allow-remote on "
                             "the command line, allow_remote=True in Python); every request still needs the token")
        if not is_loopback(host) and guards.token is None:
            raise ValueError(f"refusing to listen on {host!r} without a token: give one (--token or its variable)")
        self.routes = dict(routes)
        self.guards = guards
        self.name = name
        self.stats: dict[int, int] = {}
        self.admitted = 0
        self._slots: asyncio.Semaphore | None = None  # made in the server's event loop
        self._health = health
        self._stats_lock = threading.Lock()
        self._executor = DaemonExecutor(guards.max_inflight, f"{name}-request")
        self._socket = bind_listener(host, port)
        self.server_address = self._socket.getsockname()[:2]
        self._uvicorn = _make_uvicorn(self._app(), guards)
        self._thread: threading.Thread | None = None
        self._done = threading.Event()

    @property
    def url(self) -> str:
        host, port = self.server_address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def count(self, status: int) -> None:
        with self._stats_lock:
            self.stats[status] = self.stats.get(status, 0) + 1

    # -- serving ------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Serve until `shutdown()` or, in the main thread, SIGTERM/SIGINT (which drain, then return)."""
        try:
            self._uvicorn.run(sockets=[self._socket])
        finally:
            self._done.set()

    def serve_in_thread(self) -> GuardedServer:
        """Serve from a daemon thread (returns once the server accepts); ``shutdown()`` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name=f"{self.name}-server", daemon=True)
        self._thread.start()
        while not self._uvicorn.started and not self._done.is_set():
            self._done.wait(0.01)
        return self

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``timeout_s``), stop serving."""
        self._uvicorn.should_exit = True
        if self._thread is not None or self._uvicorn.started:
            self._done.wait(timeout_s)

    def server_close(self) -> None:
        self._uvicorn.should_exit = True
        with contextlib.suppress(OSError):
            self._socket.close()
        self._executor.shutdown()

    # -- the ASGI application -----------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        guards = self.guards
        expected = None if guards.token is None else f"Bearer {guards.token}".encode()

        async def endpoint(request: Request) -> Response:
            try:
                status, payload, headers = 200, await self._answer(request, expected), {}
            except _Reply as r:
                status, payload, headers = r.status, r.payload, r.headers
            if status >= 400 and request.method == "POST":
                if _too_large_to_drain(request):
                    headers["Connection"] = "close"  # uvicorn drops the rest of a smaller body and keeps the connection
                elif request.headers.get("connection", "").lower() == "close":
                    # uvicorn closes such a connection at once, and a close with the body still unread is a
                    # reset the client sees instead of the status: read and drop the body first
                    await self._drain(request)
            self.count(status)
            return Response(json.dumps(payload), status, headers, media_type="application/json")

        methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]
        return Starlette(routes=[Route("/{path:path}", endpoint, methods=methods)])

    async def _answer(self, request: Any, expected: bytes | None) -> dict[str, Any]:
        guards = self.guards
        method, path = request.method, request.url.path
        if method == "GET" and path == "/health":
            with self._stats_lock:
                answered = {str(k): v for k, v in sorted(self.stats.items())}
            return {"status": "ok", "server": self.name, "answered": answered, **(self._health() if self._health else {})}
        given = request.headers.get("authorization", "").encode()
        if expected is not None and not hmac.compare_digest(given, expected):
            raise _Reply(401, {"error": "missing or wrong bearer token (send 'Authorization: Bearer TOKEN')"})
        handler = self.routes.get((method, path))
        if handler is None:
            known = ", ".join(f"{m} {p}" for m, p in sorted(self.routes))
            raise _Reply(404, {"error": f"no route {method} {path}; routes: {known}"})
        if self.admitted >= guards.max_inflight + guards.max_queued:
            raise _Reply(503, {"error": f"busy: {guards.max_inflight} requests in flight and {guards.max_queued} waiting; "
                                        f"retry after {RETRY_AFTER_S} s"}, {"Retry-After": str(RETRY_AFTER_S)})
        if self._slots is None:
            self._slots = asyncio.Semaphore(guards.max_inflight)
        self.admitted += 1  # one event loop: no lock needed
        try:
            if isinstance(handler, RawRoute):
                raw, query = await self._raw(request) if method == "POST" else b"", dict(request.query_params)
                call: Callable[[], dict[str, Any]] = lambda: handler.handler(raw, query)  # noqa: E731
            else:
                body = await self._body(request) if method == "POST" else {}
                call = lambda: handler(body)  # noqa: E731
            slots = self._slots

            async def run() -> dict[str, Any]:
                async with slots:
                    return await asyncio.shield(asyncio.wrap_future(self._executor.submit(call)))

            try:
                return await asyncio.wait_for(run(), guards.request_timeout_s)
            except asyncio.TimeoutError:
                raise _Reply(504, {"error": f"the request did not finish within {guards.request_timeout_s:g} s"}) from None
            except HTTPFailure as e:
                raise _Reply(e.status, {"error": str(e)}) from None
            except Exception as e:  # a handler's bug is the request's failure, not the server's
                raise _Reply(500, {"error": f"{type(e).__name__}: {e}"}) from None
        finally:
            self.admitted -= 1

    async def _drain(self, request: Any) -> None:
        """Read and drop what is left of a refused request's body (within ``read_timeout_s``)."""
        async def read() -> None:
            async for _ in request.stream():
                pass

        with contextlib.suppress(Exception):  # a body already read, or a client gone: nothing to drain
            await asyncio.wait_for(read(), self.guards.read_timeout_s)

    async def _body(self, request: Any) -> dict[str, Any]:
        raw = await self._raw(request)
        try:
            body = json.loads(raw) if raw else {}
        except RecursionError:
            raise _Reply(400, {"error": "request body is JSON nested too deeply"}) from None
        except ValueError as e:
            raise _Reply(400, {"error": f"request body is not JSON: {e}"}) from None
        if not isinstance(body, dict):
            raise _Reply(400, {"error": f"request body must be a JSON object, got {type(body).__name__}"})
        return body

    async def _raw(self, request: Any) -> bytes:
        """The body's bytes, within the size and time limits."""
        guards = self.guards
        length_header = request.headers.get("content-length")
        if length_header is None or not length_header.strip().isdigit():
            raise _Reply(411, {"error": "a POST needs a Content-Length header"})
        length = int(length_header)
        if length > guards.max_request_bytes:
            raise _Reply(413, {"error": f"request body of {length} bytes is over the limit of {guards.max_request_bytes}"})
        try:
            raw = await asyncio.wait_for(request.body(), guards.read_timeout_s)
        except asyncio.TimeoutError:
            raise _Reply(408, {"error": f"request body not received within {guards.read_timeout_s:g} s"}) from None
        except Exception as e:  # noqa: BLE001 - the client went away or sent less than it declared
            raise _Reply(400, {"error": f"request body not received: {type(e).__name__}"}) from None
        return raw


def _too_large_to_drain(request: Any) -> bool:
    declared = request.headers.get("content-length", "")
    return not declared.strip().isdigit() or int(declared) > DRAIN_LIMIT_BYTES


def _make_uvicorn(app: Any, guards: Guards) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, draining on SIGTERM/SIGINT and then returning (uvicorn re-raises the signal,
        which would kill the process before the caller closes its pools)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handled = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self._drain_on_signal) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

        def _drain_on_signal(self, sig: int, frame: Any) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", backlog=LISTEN_BACKLOG,
                            timeout_keep_alive=30, timeout_graceful_shutdown=max(30, int(guards.request_timeout_s)),
                            h11_max_incomplete_event_size=64 << 10)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    return Server(config)
