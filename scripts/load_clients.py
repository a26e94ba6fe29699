"""Concurrent HTTP clients over loopback for the server load benchmarks (`bench_serve.py`: the
environment server's ``/verify``; `bench_generate.py`: the rollout server's ``/generate``).

A **level** is ``clients`` threads that start together and send requests back to back for
``seconds`` (the window); a request still in flight when the window closes is finished and counted
(its status, its latency), but only answers that arrived inside the window count towards the
sustained rate (``per_s``: good answers in the window / window seconds), so a long queue draining
after the window does not dilute it. Three kinds of client:

- `raw_level`: plain httpx clients, no retry: what the server itself answers (200, 503, other
  statuses, transport failures such as resets). Keep-alive by default; ``fresh=True`` opens a new
  connection for every request (as a client sending ``Connection: close`` does).
- `pool_level`: rlvr's retrying client (`rlvr.serve.client.ServerPool`): requests lost past the
  retries, and answers the caller's ``judge`` found wrong.
- `burst`: ``clients`` requests at once, each on a fresh connection.

`settle` sends one uncounted request before a level, so that work a previous level left queued does
not slow the next; `start_server` / `stop_server` run the server under test in its own process.

A ``judge`` reads a 200's JSON answer: the quantities it carries (``{"completions": 4, "tokens":
180}``, summed into ``completions_per_s`` ...), or None when the answer is wrong.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from typing import Any, Callable, Sequence

Judge = Callable[[dict[str, Any]], "dict[str, float] | None"]


class Tally:
    """What the clients of one level saw, under one lock: answers by key (an HTTP status, ``transport:NAME``,
    ``ok``...), the latencies of good answers, and the quantities of those that arrived within the window."""

    def __init__(self, good: str):
        self.good = good
        self.counts: dict[str, int] = {}
        self.latencies: list[float] = []
        self.in_window = 0
        self.sums: dict[str, float] = {}
        self.lock = threading.Lock()

    def add(self, key: str, started: float, end: float, quantities: dict[str, float] | None = None) -> None:
        now = time.monotonic()
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if key != self.good:
                return
            self.latencies.append(now - started)
            if now <= end:
                self.in_window += 1
                for name, value in (quantities or {}).items():
                    self.sums[name] = self.sums.get(name, 0.0) + value

    def summary(self, seconds: float) -> dict[str, Any]:
        return {"per_s": self.in_window / seconds, **{f"{k}_per_s": v / seconds for k, v in self.sums.items()},
                "p50_ms": 1000 * quantile(self.latencies, 0.5), "p99_ms": 1000 * quantile(self.latencies, 0.99)}


def _headers(token: str | None) -> dict[str, str]:
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}


def _judge(judge: Judge, answer: Any) -> dict[str, float] | None:
    """``judge(answer)``, None (wrong) for an answer it cannot read."""
    try:
        return judge(answer)
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _judged(response: Any, judge: Judge | None) -> tuple[str, dict[str, float] | None]:
    key = str(response.status_code)
    if key != "200" or judge is None:
        return key, None
    try:
        answer = response.json()
    except ValueError:
        return "200-wrong", None
    quantities = _judge(judge, answer)
    return (key, quantities) if quantities is not None else ("200-wrong", None)


def raw_level(url: str, path: str, clients: int, seconds: float, bodies: Sequence[bytes], *, token: str | None = None,
              timeout_s: float = 60.0, fresh: bool = False, judge: Judge | None = None) -> dict[str, Any]:
    """``clients`` plain httpx clients (no retry) sending ``POST url+path`` with ``bodies`` in turn for ``seconds``."""
    import httpx

    tally = Tally("200")
    # made before the start: a client's set-up (e.g. httpx's SSL context) is not load
    limits = httpx.Limits(max_keepalive_connections=0) if fresh else httpx.Limits()
    made = [httpx.Client(headers=_headers(token), timeout=timeout_s, trust_env=False, limits=limits) for _ in range(clients)]

    def client(k: int, end: float) -> None:
        with made[k] as c:
            i = k
            while time.monotonic() < end:
                started = time.monotonic()
                quantities = None
                try:
                    key, quantities = _judged(c.post(url + path, content=bodies[i % len(bodies)]), judge)
                except httpx.HTTPError as e:
                    key = f"transport:{type(e).__name__}"
                tally.add(key, started, end, quantities)
                i += clients

    run_threads(client, clients, seconds)
    return {"clients": clients, "statuses": tally.counts, **tally.summary(seconds), **answered(tally.counts)}


def burst(url: str, path: str, clients: int, bodies: Sequence[bytes], *, token: str | None = None, timeout_s: float = 60.0) -> dict[str, Any]:
    """``clients`` requests at once, each on a fresh connection (a trainer's many workers starting a
    step together): how many the server answered (200 or 503) and how many were reset."""
    import httpx

    tally = Tally("200")

    def client(k: int, end: float) -> None:
        started = time.monotonic()
        try:
            key = str(httpx.post(url + path, content=bodies[k % len(bodies)], timeout=timeout_s, trust_env=False, headers=_headers(token)).status_code)
        except httpx.HTTPError as e:
            key = f"transport:{type(e).__name__}"
        tally.add(key, started, end)

    run_threads(client, clients, 0.0)
    return {"clients": clients, "statuses": tally.counts, **answered(tally.counts)}


def pool_level(url: str, path: str, clients: int, seconds: float, bodies: Sequence[bytes], judge: Judge, *,
               token: str | None = None, timeout_s: float = 60.0, wrong: str = "wrong") -> dict[str, Any]:
    """``clients`` threads sharing one `ServerPool` (rlvr's retrying client) for ``seconds``: good answers
    (``ok``), answers ``judge`` refused (counted as ``wrong``), requests lost past the retries (``lost``;
    ``lost_reasons`` keeps the first few messages), the pool's retries and the statuses it saw."""
    from rlvr.serve.client import RemoteError, ServerPool

    pool = ServerPool(url, token, timeout_s=timeout_s)
    tally = Tally("ok")
    reasons: list[str] = []

    def client(k: int, end: float) -> None:
        i = k
        while time.monotonic() < end:
            started = time.monotonic()
            quantities = None
            try:
                quantities = _judge(judge, pool.request("POST", path, content=bodies[i % len(bodies)]))
                key = "ok" if quantities is not None else wrong
            except RemoteError as e:
                key = "lost"
                with tally.lock:
                    if len(reasons) < 3:
                        reasons.append(str(e).splitlines()[0][:300])
            tally.add(key, started, end, quantities)
            i += clients

    run_threads(client, clients, seconds)
    pool.close()
    counts = {"ok": 0, wrong: 0, "lost": 0, **tally.counts}
    return {"clients": clients, **counts, "retries": pool.stats.retries, **tally.summary(seconds),
            "statuses": {str(k): v for k, v in sorted(pool.stats.by_status.items())}, "lost_reasons": reasons}


def settle(url: str, path: str, body: bytes, *, token: str | None = None, timeout_s: float = 60.0) -> None:
    """One request on a fresh connection, not counted: it is answered once the work a previous level
    left queued (requests of clients that have gone) is done, so every level starts on an idle server."""
    import httpx

    try:
        httpx.post(url + path, content=body, timeout=timeout_s, trust_env=False, headers=_headers(token))
    except httpx.HTTPError:
        pass


def answered(statuses: dict[str, int]) -> dict[str, int]:
    """Requests the server answered (any HTTP status) and those that failed in transport (reset, refused, timed out)."""
    failed = sum(v for k, v in statuses.items() if k.startswith("transport"))
    return {"answered": sum(statuses.values()) - failed, "transport_failures": failed}


def run_threads(target: Callable[[int, float], None], n: int, seconds: float) -> float:
    """Run ``target(k, end)`` in ``n`` threads released together at ``t0`` (``end = t0 + seconds``, the
    window); the seconds from ``t0`` to the last thread's end."""
    clock: dict[str, float] = {}
    ready = threading.Barrier(n + 1, action=lambda: clock.setdefault("t0", time.monotonic()))

    def wrapped(k: int) -> None:
        ready.wait()
        target(k, clock["t0"] + seconds)

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    ready.wait()
    for t in threads:
        t.join()
    return time.monotonic() - clock["t0"]


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank; NaN when there are none)."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def start_server(cmd: list[str], cwd: str | os.PathLike, env: dict[str, str], wait_s: float = 300.0) -> tuple[subprocess.Popen, str]:
    """Start a server that prints ``... on http://HOST:PORT``; the process and that URL (its output is
    drained in the background). Exits naming the command and the end of its output if it has not
    printed its address within ``wait_s``."""
    import queue

    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    started = threading.Event()

    def read() -> None:  # keeps the pipe drained for the server's life; lines are kept until it has started
        for line in proc.stdout:
            if not started.is_set():
                lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + wait_s
    seen: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        found = re.search(r"on (http://[\d.]+:\d+)", line)
        if found:
            started.set()
            return proc, found.group(1)
    stop_server(proc)
    raise SystemExit(f"the server `{' '.join(cmd)}` in {cwd} did not start within {wait_s:g} s:\n{''.join(seen)[-2000:]}")


def stop_server(proc: subprocess.Popen, wait_s: float = 60.0) -> None:
    """SIGTERM (the new servers drain), then SIGKILL past ``wait_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_json(path: str | os.PathLike, data: dict[str, Any]) -> None:
    from pathlib import Path

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}")
