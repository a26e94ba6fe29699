#!/usr/bin/env python3
"""Load on the environment server (``rlvr envs serve math-v1 --task arithmetic-v1``) over loopback.

For each server checkout (``--checkout NAME=PATH``, default this one as ``after``) and each
number of concurrent clients (``--clients 1,16,64,256``), every client thread sends
``POST /verify`` (one arithmetic problem by ``{split, index}``, its gold answer) for ``--seconds``:

- **raw**: a plain keep-alive httpx client, no retry: what the server itself answers (200, 503,
  other statuses, transport failures such as resets), verifications/s (200s answered within the
  window, per second) and p50/p99 latency of the 200s;
- **pool** (default on, ``--no-pool`` skips it): rlvr's retrying client (`rlvr.serve.client.ServerPool`):
  requests lost past the retries, and whether every answered verdict passed (the answers are
  all correct, so a verdict that did not pass is reward noise).

The clients are `load_clients` (shared with `bench_generate.py`, the rollout server's ``/generate``).
Bounded in count and time: ``--seconds`` per level, loopback only. Prints a table and writes JSON
(``--out``). Compare rows of one invocation (same machine, same load), not across runs.

    python scripts/bench_serve.py --checkout before=/path/to/old/checkout --checkout after=.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import load_clients

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "bench-token-0123456789"


def start_server(checkout: Path, workers: int) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(checkout), "RLVR_ENV_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "rlvr.cli", "envs", "serve", "math-v1", "--task", "arithmetic-v1", "--port", "0",
           "--verify-workers", str(workers)]
    return load_clients.start_server(cmd, checkout, env, wait_s=120)


def requests_for(n: int) -> list[bytes]:
    import tasks

    task = tasks.make("arithmetic-v1")
    bodies = []
    for i, problem in enumerate(task.problems("test", limit=n)):
        bodies.append(json.dumps({"problems": [{"split": "test", "index": i}],
                                  "completions": [task.env.gold_completion(problem)]}).encode())
    return bodies


def passed(answer: dict) -> dict[str, float] | None:
    """The answers are all correct: a verdict that did not pass is reward noise (None)."""
    return {} if answer["verdicts"][0]["passed"] is True else None


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
            load_clients.raw_level(url, "/verify", 4, 1.0, bodies, token=TOKEN)  # warm-up: the verifier processes start
            for attempt in range(3 if args.burst else 0):
                row = {"server": name, "client": f"burst{attempt}", "per_s": float("nan"), "p50_ms": float("nan"),
                       "p99_ms": float("nan"), **load_clients.burst(url, "/verify", args.burst, bodies, token=TOKEN)}
                rows.append(row)
                print(f"{name:8} burst of {args.burst} fresh connections: {row['statuses']}", flush=True)
            for c in levels:
                row = {"server": name, "client": "raw", **load_clients.raw_level(url, "/verify", c, args.seconds, bodies, token=TOKEN)}
                rows.append(row)
                print(f"{name:8} raw  {c:4d} clients: {row['per_s']:8.1f} verifications/s  p50 {row['p50_ms']:7.1f} ms  "
                      f"p99 {row['p99_ms']:7.1f} ms  {row['statuses']}", flush=True)
                if not args.no_pool:
                    row = {"server": name, "client": "pool", **load_clients.pool_level(url, "/verify", c, args.seconds, bodies, passed,
                                                                                        token=TOKEN, wrong="not_passed")}
                    rows.append(row)
                    print(f"{name:8} pool {c:4d} clients: {row['per_s']:8.1f} verifications/s  p50 {row['p50_ms']:7.1f} ms  "
                          f"p99 {row['p99_ms']:7.1f} ms  ok {row['ok']} lost {row['lost']} not passed {row['not_passed']} "
                          f"retries {row['retries']}", flush=True)
        finally:
            load_clients.stop_server(proc, 30)
    load_clients.write_json(args.out, {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                                       "seconds": args.seconds, "rows": rows})
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
