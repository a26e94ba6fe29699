#!/usr/bin/env python3
"""Load on the environment server (``rlvr envs serve math-v1 --task arithmetic-v1``) over loopback.

For each server checkout (``--checkout NAME=PATH``, default this one as ``after``) and each
number of concurrent clients (``--clients 1,16,64,256``), every client thread sends
``POST /verify`` (one arithmetic problem by ``{split, index}``, its gold answer) for ``--seconds``:

- **raw**: a plain keep-alive httpx client, no retry: what the server itself answers (200, 503,
  other statuses, transport failures such as resets), verifications/s and p50/p99 latency of the
  200s;
- **pool** (``--pool``, default on): rlvr's retrying client (`rlvr.serve.client.ServerPool`):
  requests lost past the retries, and whether every answered verdict passed (the answers are
  all correct, so a verdict that did not pass is reward noise).

Bounded in count and time: ``--seconds`` per level, loopback only. Prints a table and writes JSON
(``--out``). Compare rows of one invocation (same machine, same load), not across runs.

    python scripts/bench_serve.py --checkout before=/path/to/old/checkout --checkout after=.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "bench-token-0123456789"


def start_server(checkout: Path, workers: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "RLVR_ENV_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "rlvr.cli", "envs", "serve", "math-v1", "--task", "arithmetic-v1", "--port", "0",
           "--verify-workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        found = re.search(r"on (http://[\d.]+:\d+)", line)
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
            return proc, found.group(1)
    proc.kill()
    raise SystemExit(f"the server in {checkout} did not start: {proc.stdout.read()[-2000:]}")


def requests_for(n: int) -> list[bytes]:
    import tasks

    task = tasks.make("arithmetic-v1")
    bodies = []
    for i, problem in enumerate(task.problems("test", limit=n)):
        bodies.append(json.dumps({"problems": [{"split": "test", "index": i}],
                                  "completions": [task.env.gold_completion(problem)]}).encode())
    return bodies


def raw_level(url: str, clients: int, seconds: float, bodies: list[bytes]) -> dict:
    import httpx

    statuses: dict[str, int] = {}
    latencies: list[float] = []
    lock = threading.Lock()
    made = [httpx.Client(headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}, timeout=60, trust_env=False)
            for _ in range(clients)]

    def client(k: int) -> None:
        with made[k] as c:
            end = time.monotonic() + seconds
            i = k
            while time.monotonic() < end:
                t0 = time.monotonic()
                try:
                    r = c.post(f"{url}/verify", content=bodies[i % len(bodies)])
                    key = str(r.status_code)
                except httpx.HTTPError as e:
                    key = f"transport:{type(e).__name__}"
                dt = time.monotonic() - t0
                with lock:
                    statuses[key] = statuses.get(key, 0) + 1
                    if key == "200":
                        latencies.append(dt)
                i += clients

    elapsed = _run_threads(client, clients)
    ok = statuses.get("200", 0)
    return {"clients": clients, "statuses": statuses, "per_s": ok / elapsed,
            "p50_ms": 1000 * _quantile(latencies, 0.5), "p99_ms": 1000 * _quantile(latencies, 0.99),
            "answered": sum(v for k, v in statuses.items() if not k.startswith("transport")),
            "transport_failures": sum(v for k, v in statuses.items() if k.startswith("transport"))}


def burst(url: str, clients: int, bodies: list[bytes]) -> dict:
    """``clients`` requests at once, each on a fresh connection (a trainer's many workers starting a
    step together): how many the server answered (200 or 503) and how many were reset."""
    import httpx

    statuses: dict[str, int] = {}
    lock = threading.Lock()

    def client(k: int) -> None:
        try:
            r = httpx.post(f"{url}/verify", content=bodies[k % len(bodies)], timeout=60, trust_env=False,
                           headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            key = str(r.status_code)
        except httpx.HTTPError as e:
            key = f"transport:{type(e).__name__}"
        with lock:
            statuses[key] = statuses.get(key, 0) + 1

    _run_threads(client, clients)
    return {"clients": clients, "statuses": statuses,
            "answered": sum(v for k, v in statuses.items() if not k.startswith("transport")),
            "transport_failures": sum(v for k, v in statuses.items() if k.startswith("transport"))}


def pool_level(url: str, clients: int, seconds: float, bodies: list[bytes]) -> dict:
    from rlvr.serve.client import RemoteError, ServerPool

    pool = ServerPool(url, TOKEN, timeout_s=60)
    counts = {"ok": 0, "lost": 0, "not_passed": 0}
    latencies: list[float] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        end = time.monotonic() + seconds
        i = k
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                answer = pool.request("POST", "/verify", content=bodies[i % len(bodies)])
                passed = answer["verdicts"][0]["passed"] is True
                key = "ok" if passed else "not_passed"
            except RemoteError:
                key = "lost"
            with lock:
                counts[key] += 1
                if key == "ok":
                    latencies.append(time.monotonic() - t0)
            i += clients

    elapsed = _run_threads(client, clients)
    pool.close()
    return {"clients": clients, **counts, "retries": pool.stats.retries, "per_s": counts["ok"] / elapsed,
            "p50_ms": 1000 * _quantile(latencies, 0.5), "p99_ms": 1000 * _quantile(latencies, 0.99)}


def _run_threads(target, n: int) -> float:
    """Run ``target(k)`` in ``n`` threads; the seconds from the moment all were ready to the last one's end
    (a client's set-up, e.g. httpx's SSL context, is not counted)."""
    ready = threading.Barrier(n + 1)

    def wrapped(k: int) -> None:
        ready.wait()
        target(k)

    threads = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    ready.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    return time.monotonic() - t0


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", default=[], help="NAME=PATH of a checkout whose server to load (repeatable)")
    ap.add_argument("--clients", default="1,16,64,256")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--workers", type=int, default=2, help="the server's verifier processes")
    ap.add_argument("--burst", type=int, default=0, help="also N requests at once on fresh connections, 3 times (0: none)")
    ap.add_argument("--no-pool", action="store_true", help="skip the retrying client's rows")
    ap.add_argument("--out", default="bench_results/serve.json")
    ap.add_argument("--record", default=None, metavar="NAME",
                    help="also write records/NAME.json (the figures the docs cite: rlvr.records)")
    args = ap.parse_args()
    checkouts = [c.split("=", 1) for c in args.checkout] or [["after", str(ROOT)]]
    levels = [int(c) for c in args.clients.split(",")]
    bodies = requests_for(64)
    rows = []
    for name, path in checkouts:
        proc, url = start_server(Path(path).resolve(), args.workers)
        try:
            raw_level(url, 4, 1.0, bodies)  # warm-up: the verifier processes start
            for attempt in range(3 if args.burst else 0):
                row = {"server": name, "client": f"burst{attempt}", "per_s": float("nan"), "p50_ms": float("nan"),
                       "p99_ms": float("nan"), **burst(url, args.burst, bodies)}
                rows.append(row)
                print(f"{name:8} burst of {args.burst} fresh connections: {row['statuses']}", flush=True)
            for c in levels:
                row = {"server": name, "client": "raw", **raw_level(url, c, args.seconds, bodies)}
                rows.append(row)
                print(f"{name:8} raw  {c:4d} clients: {row['per_s']:8.1f} verifications/s  p50 {row['p50_ms']:7.1f} ms  "
                      f"p99 {row['p99_ms']:7.1f} ms  {row['statuses']}", flush=True)
                if not args.no_pool:
                    row = {"server": name, "client": "pool", **pool_level(url, c, args.seconds, bodies)}
                    rows.append(row)
                    print(f"{name:8} pool {c:4d} clients: {row['per_s']:8.1f} verifications/s  p50 {row['p50_ms']:7.1f} ms  "
                          f"p99 {row['p99_ms']:7.1f} ms  ok {row['ok']} lost {row['lost']} not passed {row['not_passed']} "
                          f"retries {row['retries']}", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                               "seconds": args.seconds, "rows": rows}, indent=1))
    print(f"wrote {out}")
    if args.record:
        from rlvr.records import write_record

        figures = {}
        for row in rows:
            prefix = f"{row['server']}_{row['client']}_c{row['clients']}"
            figures |= {f"{prefix}_per_s": row["per_s"], f"{prefix}_p50_ms": row["p50_ms"], f"{prefix}_p99_ms": row["p99_ms"]}
            if row["client"] == "raw" or row["client"].startswith("burst"):
                figures |= {f"{prefix}_answered": row["answered"], f"{prefix}_resets": row["transport_failures"],
                            f"{prefix}_503": row["statuses"].get("503", 0), f"{prefix}_200": row["statuses"].get("200", 0)}
                if row["client"].startswith("burst"):
                    continue
            else:
                figures |= {f"{prefix}_lost": row["lost"], f"{prefix}_not_passed": row["not_passed"], f"{prefix}_retries": row["retries"]}
        figures = {k: v for k, v in figures.items() if v == v}  # NaN (no answered request) is left out
        command = "python scripts/bench_serve.py " + " ".join(sys.argv[1:])
        print(f"wrote {write_record(args.record, command, figures, note='loopback, one machine: clients and servers share its cores')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
