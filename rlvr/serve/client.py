"""The client side of every rlvr service: one or more servers of the same kind behind a pooled
HTTP client (httpx), with balancing, bounded retries and failover.

    servers = ServerPool(["http://10.0.0.5:8400", "http://10.0.0.6:8400"], token="...", timeout_s=60)
    servers.request("POST", "/verify", {...})      # a JSON object, or RemoteError

- **Balancing**: a request goes to the live server with the fewest requests outstanding (ties in
  turn), so a slow server gets less work.
- **Retries**: a transport failure (refused, reset, closed mid-answer), a 502 and an answer that is
  not a JSON object are retried, up to ``RetryPolicy.attempts`` failures in all; a busy server's
  503/429 (``Retry-After`` honoured) is retried until the request's ``timeout_s`` is spent; with
  exponential backoff and full jitter. A server that failed is set aside for a cooldown and the next try goes to another one. A timeout (or a server's 504) is retried only on a
  server this request has not tried yet: on one server a retry would only double the wait.
- **Junk**: ``request(check=...)`` vets a well-formed answer (a wrong count of verdicts, a NaN
  reward): junk is retried on another server and counted (``PoolStats.junk``), like an answer that
  is not JSON.
- **Not retried**: a 4xx that says the request itself is wrong (401 names the server that refused
  the token). A 500 (the handler's own error) is retried once, on a server not yet tried.

Past the retries the request raises `RemoteError` naming the servers and the last reason; callers
turn it into an ``error``/``timeout`` verdict, never a reward of 0. ``stats`` counts requests,
retries, failovers and failures per server (``alive()`` says which servers are not cooling down).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from rlvr import UserError

RETRYABLE_STATUS = frozenset({429, 502, 503})
BUSY_STATUS = frozenset({429, 503})
"""Retried until the request's time budget is spent rather than a number of tries."""
TIMEOUT_STATUS = frozenset({408, 504})


class ServerSetupError(UserError, ValueError):
    """The servers given cannot be used (a bad URL, a refused token, servers that do not answer or
    disagree): one line for the user, no traceback (a ValueError too, for callers that catch those)."""


class RemoteError(Exception):
    """A remote call failed; ``timeout`` says whether it ran out of time (a ``timeout`` verdict)
    rather than failing (an ``error`` verdict); ``status`` is the HTTP status of an answer that was
    not retried (401, 400, 500...), None when the servers failed or did not answer."""

    def __init__(self, reason: str, *, timeout: bool = False, status: int | None = None, server: str | None = None):
        super().__init__(reason)
        self.timeout = timeout
        self.status = status
        self.server = server
        """The server that answered last (None: none did, or the error is not one server's)."""


class WrongAnswer(RemoteError):
    """A server answered, but not as a server of its service with this token does (it refused the
    token, or sent something that is not a JSON object): asking it again will not mend that."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a request is retried.

    Attributes:
        attempts: Failed tries in all for one request (1 = no retry), across servers; a busy
            server's 503/429 does not count (those are retried within the request's ``timeout_s``).
        backoff_s: The first backoff; each retry doubles it, up to ``max_backoff_s``; the wait is
            drawn uniformly below it (full jitter), or around a server's ``Retry-After``.
        max_backoff_s: The longest wait between two tries.
        cooldown_s: How long a server that failed is passed over (doubling while it keeps failing,
            up to 8×).
    """

    attempts: int = 6
    backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    cooldown_s: float = 2.0

    def __post_init__(self) -> None:
        if not (isinstance(self.attempts, int) and self.attempts >= 1):
            raise ValueError(f"attempts must be an integer >= 1, got {self.attempts!r}")
        for name in ("backoff_s", "max_backoff_s", "cooldown_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    def delay(self, retry: int, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1, 2, ...)."""
        if retry_after_s is not None:
            return min(self.max_backoff_s, retry_after_s) * rng.uniform(0.5, 1.5)
        return rng.uniform(0, min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1)))


@dataclass
class ServerState:
    """What the pool knows of one server."""

    url: str
    outstanding: int = 0
    requests: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    down_until: float = 0.0
    last_error: str = ""
    set_aside: bool = False
    """Failed and not answered since (a warning said so; another says when it answers again)."""


@dataclass
class PoolStats:
    """Counters over the pool's life: requests made, retries, requests that moved to another
    server after a failure (failovers), requests that failed for good."""

    requests: int = 0
    retries: int = 0
    failovers: int = 0
    failed: int = 0
    junk: int = 0
    by_status: dict[int, int] = field(default_factory=dict)


class _Retry(Exception):
    def __init__(self, reason: str, *, timeout: bool = False, retry_after_s: float | None = None, server_down: bool = True,
                 status: int | None = None):
        super().__init__(reason)
        self.timeout, self.retry_after_s, self.server_down, self.status = timeout, retry_after_s, server_down, status


Check = Callable[[dict[str, Any]], "str | None"]
"""Vets a JSON answer: None when it is sound, else what is wrong with it (the answer is junk)."""


def _lower_scheme(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    return scheme.lower() + sep + rest if sep and scheme.lower() in ("http", "https") else url


def normalize_urls(urls: str | Sequence[str], what: str = "url") -> tuple[str, ...]:
    """One URL or several (a list, or one string with commas) as a tuple of base URLs; one-line errors."""
    from urllib.parse import urlsplit

    if not isinstance(urls, (str, list, tuple)):
        raise ServerSetupError(f"{what} must be a URL or a non-empty list of URLs, got a {type(urls).__name__}")
    items = [u.strip() for u in urls.split(",")] if isinstance(urls, str) else list(urls)
    if not items or not all(isinstance(u, str) and u for u in items):
        raise ServerSetupError(f"{what} must be a URL or a non-empty list of URLs, got {_redacted(urls)!r}")
    items = [_lower_scheme(u) for u in items]  # a scheme is case-insensitive (HTTP://h is http://h)
    for u in items:
        try:  # (reading the port refuses one that is no number or out of range; a broken IPv6 address is refused too)
            parts, port = urlsplit(u), urlsplit(u).port
        except ValueError:
            parts, port = None, None
        if parts is not None and "@" in parts.netloc:  # messages name the servers: a password there would be printed
            raise ServerSetupError(f"{what}: {_redacted(u)} carries a user name or password; servers take a bearer token instead")
        if not u.startswith(("http://", "https://")):
            raise ServerSetupError(f"{what} must start with http:// or https://, got {_redacted(u)!r}")
        if parts is None or not parts.hostname or " " in u or port == 0 or parts.netloc.endswith(":"):
            raise ServerSetupError(f"{what}: {_redacted(u)!r} is not an http(s) address of a server (e.g. http://127.0.0.1:8000)")
    out = tuple(dict.fromkeys(u.rstrip("/") for u in items))
    return out


class ServerPool:
    """One or more servers of one service (see the module docstring).

    Args:
        urls: A base URL, a comma-separated string of them, or a list.
        token: Bearer token sent with every request (None: none).
        timeout_s: Seconds one try may take (per request; ``request(timeout_s=...)`` overrides).
        retry: `RetryPolicy`.
        max_connections: Connections one calling thread keeps open (keep-alive).
        seed: Seeds the jitter (tests); None draws it.
    """

    def __init__(self, urls: str | Sequence[str], token: str | None = None, timeout_s: float = 60.0,
                 retry: RetryPolicy = RetryPolicy(), max_connections: int = 512, seed: int | None = None):
        import httpx

        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.urls = normalize_urls(urls)
        self.token = token
        self.timeout_s = float(timeout_s)
        self.retry = retry
        self.servers = [ServerState(u) for u in self.urls]
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._turn = 0
        self._rng = random.Random(seed)
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._max_connections = max_connections
        # one httpx client per calling thread: a single client shared by hundreds of threads serialises
        # them on its connection pool's lock (measured: 256 threads got a tenth of the throughput)
        self._local = threading.local()
        self._clients: list[Any] = []
        self._ssl = httpx.create_ssl_context() if any(u.startswith("https://") for u in self.urls) else None

    def __repr__(self) -> str:
        return f"ServerPool({', '.join(self.urls)})"

    @property
    def url(self) -> str:
        """The servers, for messages."""
        return ", ".join(self.urls)

    def alive(self) -> list[str]:
        """The servers not cooling down after a failure."""
        now = time.monotonic()
        return [s.url for s in self.servers if s.down_until <= now]

    @property
    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            import httpx

            client = httpx.Client(headers=self._headers, timeout=self.timeout_s, trust_env=False,
                                  verify=self._ssl if self._ssl is not None else False,  # http only: no certificates to load
                                  limits=httpx.Limits(max_connections=self._max_connections,
                                                      max_keepalive_connections=self._max_connections))
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()
        self._local = threading.local()

    def __enter__(self) -> ServerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:  # picklable for worker pools: a new client on the other side
        return {"urls": self.urls, "token": self.token, "timeout_s": self.timeout_s, "retry": self.retry}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["urls"], state["token"], state["timeout_s"], state["retry"])  # type: ignore[misc]

    # -- choosing a server --------------------------------------------------------------------

    def _pick(self, tried: set[str]) -> ServerState:
        with self._lock:
            now = time.monotonic()
            live = [s for s in self.servers if s.down_until <= now]
            fresh = [s for s in live if s.url not in tried] or live
            if not fresh:  # every server cooling down: the one that comes back first
                fresh = [min(self.servers, key=lambda s: s.down_until)]
            least = min(s.outstanding for s in fresh)
            ties = [s for s in fresh if s.outstanding == least]
            self._turn += 1
            chosen = ties[self._turn % len(ties)]
            chosen.outstanding += 1
            chosen.requests += 1
            return chosen

    def _done(self, server: ServerState, failure: str | None, *, down: bool) -> None:
        warning = None
        with self._lock:
            server.outstanding -= 1
            if failure is None:
                server.consecutive_failures = 0
                if server.set_aside:
                    server.set_aside = False
                    warning = f"warning: {server.url} answers again: back in use"
            else:
                server.failures += 1
                server.last_error = failure
                if down:
                    server.consecutive_failures += 1
                    backoff = self.retry.cooldown_s * 2 ** min(3, server.consecutive_failures - 1)
                    server.down_until = time.monotonic() + backoff
                    if not server.set_aside:
                        server.set_aside = True
                        warning = (f"warning: {server.url} set aside (its requests go to the other servers until it answers "
                                   f"again): {failure}")
        if warning:  # failover would otherwise be invisible during a run: one line per transition
            import sys

            print(warning.splitlines()[0], file=sys.stderr, flush=True)

    # -- one request --------------------------------------------------------------------------

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None, *, timeout_s: float | None = None,
                content: bytes | None = None, content_type: str = "application/json", check: Check | None = None) -> dict[str, Any]:
        """``method path`` with a JSON body (or raw ``content``) on one of the servers; the JSON object
        answered, or `RemoteError` after the retries. ``check`` vets the answer (`Check`): junk is
        retried on another server."""
        body = content if content is not None else (None if payload is None else json.dumps(payload).encode())
        budget = self.timeout_s if timeout_s is None else float(timeout_s)
        tried: set[str] = set()
        reasons: list[str] = []
        server_errors = failures = tries = 0
        started = time.monotonic()
        with self._lock:
            self.stats.requests += 1
        while True:
            tries += 1
            server = self._pick(tried)
            if server.url not in tried and tried:
                with self._lock:
                    self.stats.failovers += 1
            tried.add(server.url)
            try:
                answer = self._once(server, method, path, body, content_type, budget)
                junk = check(answer) if check is not None else None
                if junk:
                    with self._lock:
                        self.stats.junk += 1
                    raise _Retry(f"{server.url}{path} sent junk: {junk}")
            except _Retry as r:
                self._done(server, str(r), down=r.server_down)
                reasons.append(str(r))
                if r.status == 500:  # the handler's own error: once more elsewhere, never twice
                    server_errors += 1
                    if server_errors > 1 or len(tried) >= len(self.servers):
                        with self._lock:
                            self.stats.failed += 1
                        raise RemoteError(str(r), status=500, server=server.url) from None
                if r.timeout and len(tried) >= len(self.servers):
                    return self._fail(path, tried, reasons, timeout=True, server=server.url)
                delay = self.retry.delay(tries, r.retry_after_s, self._rng)
                if r.status in BUSY_STATUS:  # busy, not broken: worth waiting for, within the request's own budget
                    if time.monotonic() - started + delay > budget:
                        break
                else:
                    failures += 1
                    if failures >= self.retry.attempts:
                        break
                with self._lock:
                    self.stats.retries += 1
                time.sleep(delay)
                continue
            except RemoteError as e:
                e.server = server.url
                self._done(server, str(e), down=False)
                with self._lock:
                    self.stats.failed += 1
                raise
            self._done(server, None, down=False)
            return answer
        return self._fail(path, tried, reasons, timeout=False, server=server.url)

    def _fail(self, path: str, tried: set[str], reasons: list[str], *, timeout: bool, server: str) -> dict[str, Any]:
        with self._lock:
            self.stats.failed += 1
        servers = ", ".join(u for u in self.urls if u in tried)
        raise RemoteError(f"{path} failed after {len(reasons)} tries on {servers}: {reasons[-1]}", timeout=timeout,
                          server=server if len(tried) == 1 else None)

    def _once(self, server: ServerState, method: str, path: str, body: bytes | None, content_type: str,
              budget: float) -> dict[str, Any]:
        import httpx

        url = server.url + path
        headers = {"Content-Type": content_type} if body is not None else {}
        deadline = time.monotonic() + budget
        try:
            # streamed, so the whole answer has one deadline: httpx's own timeout bounds each read, and
            # a server that trickles a byte at a time would otherwise hold the request for ever
            with self._client.stream(method, url, content=body, headers=headers,
                                     timeout=httpx.Timeout(budget, connect=min(budget, 10.0))) as streamed:
                chunks = []
                for chunk in streamed.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise _Retry(f"{url} did not answer within {budget:g} s (its answer was still arriving)", timeout=True)
                response = httpx.Response(streamed.status_code, headers=streamed.headers, content=b"".join(chunks))
        except httpx.TimeoutException as e:
            if isinstance(e, httpx.ConnectTimeout):
                raise _Retry(f"{server.url} did not accept a connection within {min(budget, 10.0):g} s") from None
            if isinstance(e, httpx.PoolTimeout):
                raise _Retry(f"no free connection to {server.url} within {budget:g} s", server_down=False) from None
            raise _Retry(f"{url} did not answer within {budget:g} s", timeout=True) from None
        except httpx.TransportError as e:
            raise _Retry(f"{server.url} unreachable or dropped the connection: {type(e).__name__}: {e}") from None
        status = response.status_code
        with self._lock:
            self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        if status in RETRYABLE_STATUS:
            raise _Retry(f"{url} answered HTTP {status} ({_detail(response)})", retry_after_s=_retry_after(response),
                         server_down=status == 502, status=status)
        if status in TIMEOUT_STATUS:
            raise _Retry(f"{url} answered HTTP {status} ({_detail(response)})", timeout=True, server_down=False)
        if status == 401:
            raise RemoteError(f"{server.url} refused the token (HTTP 401): check the token given for it "
                              "(--token or the service's token variable)", status=401)
        if status == 500:
            raise _Retry(f"{url} answered HTTP 500: {_detail(response)}", server_down=False, status=500)
        if status >= 400:
            raise RemoteError(f"{url} answered HTTP {status}: {_detail(response)}", status=status)
        try:
            answer = json.loads(response.content)
        except (ValueError, RecursionError):
            raise _Retry(f"{url} sent something that is not JSON: {response.content[:120]!r}") from None
        if not isinstance(answer, dict):
            raise _Retry(f"{url} sent a JSON {type(answer).__name__}, expected an object")
        return answer

    # -- start-up checks ----------------------------------------------------------------------

    def check(self, path: str = "/health", timeout_s: float = 10.0) -> dict[str, dict[str, Any]]:
        """Ask every server ``GET path`` once (no retry), all at once, so the check takes at most
        about ``timeout_s`` however many servers there are; their answers by URL, or one
        `RemoteError` naming every server that did not answer (a start-up check before anything loads):
        a `WrongAnswer` when one of them answered wrongly (token, not JSON)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(self.servers)) or 1, thread_name_prefix="rlvr-check") as pool:
            outcomes = list(pool.map(lambda s: self._check_one(s.url, path, timeout_s), self.servers))
        bad = [problem for _, _, problem, _ in outcomes if problem]
        if bad:
            raise (WrongAnswer if any(wrong for *_, wrong in outcomes) else RemoteError)("; ".join(bad))
        return {url: answer for url, answer, _, _ in outcomes}

    def _check_one(self, url: str, path: str, timeout_s: float) -> tuple[str, Any, str | None, bool]:
        """(url, its JSON answer, None, False) or (url, None, what was wrong, whether it answered wrongly) for one server."""
        import httpx

        try:
            r = self._client.get(url + path, timeout=httpx.Timeout(timeout_s))
            if r.status_code == 401:
                return url, None, f"{url} refused the token (HTTP 401)", True
            if r.status_code != 200:  # a 4xx other than "too early / too many" will not mend by waiting (a wrong address or path)
                wrong = 400 <= r.status_code < 500 and r.status_code not in (408, 425, 429)
                return url, None, f"{url}{path} answered HTTP {r.status_code} ({_detail(r)})", wrong
            answer = r.json()
            if not isinstance(answer, dict):
                raise ValueError("not a JSON object")
            return url, answer, None, False
        except httpx.HTTPError as e:
            return url, None, f"{url} does not answer ({type(e).__name__})", False
        except ValueError:
            return url, None, f"{url}{path} sent something that is not a JSON object", True


def _redacted(urls: Any) -> Any:
    """``urls`` with any ``user:password@`` replaced by ``***@``, for messages (`rlvr.config.shown`, item by item)."""
    from rlvr.config import shown

    if isinstance(urls, (list, tuple)):
        return [_redacted(u) for u in urls]
    return shown(urls) if isinstance(urls, str) else urls


def _detail(response: Any) -> str:
    """What an error answer says, on one short line: its JSON error (rlvr's ``error``, OpenAI's and vLLM's
    ``error.message``, FastAPI's ``detail``), an HTML page's title or text, or the start of its text."""
    import html
    import re

    text = response.content[:65536].decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
    except (ValueError, RecursionError):
        answer = None
    if isinstance(answer, dict):
        error = answer.get("error", answer.get("detail"))
        error = error.get("message", error) if isinstance(error, dict) else error
        said = _one_line(error if isinstance(error, str) else json.dumps(error)) if error not in (None, "", [], {}) else ""
        if said:
            return said
    if text.startswith("<") or "html" in response.headers.get("content-type", ""):  # a proxy's or another server's error page
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        said = _one_line(html.unescape(title.group(1))) if title else ""
        if not said:
            body = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", text, flags=re.IGNORECASE | re.DOTALL)
            said = _one_line(html.unescape(re.sub(r"<[^>]*>", " ", body)))
        return f"an HTML page: {said}" if said else "an HTML page"
    return _one_line(text) or response.reason_phrase or f"HTTP {response.status_code}"


def _one_line(text: str, limit: int = 160) -> str:
    """``text`` on one line of at most ``limit`` characters, without control characters (a terminal's escapes)."""
    import re

    line = " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x1f\x7f-\x9f]", " ", text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
