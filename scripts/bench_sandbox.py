#!/usr/bin/env python3
"""Sandbox overhead and throughput per backend, beside a plain ``subprocess`` + ``python3`` run.

For each backend (and the baseline) in one invocation:
- latency: the same small program run ``--latency-jobs`` times one after another (median, p95);
- throughput: ``--jobs`` programs submitted at once with the backend's concurrency (jobs/s).
The baseline runs ``python3 main.py`` in a temporary directory with ``subprocess.run``, the way
many RL reward scripts do, with as many threads as there are cores.

Prints a table and writes JSON (``--out``). Numbers depend on the machine and on what else runs
on it: compare rows of one invocation, not across runs.

    python scripts/bench_sandbox.py --jobs 1000 --backends local,process
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sandboxes  # noqa: E402

PROGRAM = "import sys\nprint(sum(range(1000)))\n"
EXPECTED = b"499500\n"


def baseline_run(python: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "main.py").write_text(PROGRAM)
        return subprocess.run([python, "main.py"], cwd=d, capture_output=True, timeout=60).stdout


def cpu_now(backend=None) -> float | None:
    """CPU seconds of this process, its reaped children and (for warm workers) the backend's cgroups."""
    import resource

    self_, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = self_.ru_utime + self_.ru_stime + kids.ru_utime + kids.ru_stime
    if backend is not None and hasattr(backend, "cpu_seconds"):
        extra = backend.cpu_seconds()
        if extra is None:
            return None
        total += extra
    return total


def measure(run_one, n_latency: int, n_jobs: int, concurrency: int, backend=None, cpu_visible: bool = True) -> dict:
    for _ in range(min(5, n_latency)):  # warm-up (worker start, caches)
        run_one()
    lat = []
    for _ in range(n_latency):
        t = time.perf_counter()
        out = run_one()
        lat.append(time.perf_counter() - t)
        if out != EXPECTED:
            raise RuntimeError(f"wrong output {out!r}")
    t, cpu0 = time.perf_counter(), cpu_now(backend)
    with cf.ThreadPoolExecutor(concurrency) as ex:
        outs = list(ex.map(lambda _: run_one(), range(n_jobs)))
    elapsed, cpu1 = time.perf_counter() - t, cpu_now(backend)
    bad = sum(o != EXPECTED for o in outs)
    lat.sort()
    return {
        "jobs_per_s": n_jobs / elapsed, "jobs": n_jobs, "concurrency": concurrency, "wrong_outputs": bad,
        "latency_median_ms": statistics.median(lat) * 1000, "latency_p95_ms": lat[int(0.95 * (len(lat) - 1))] * 1000,
        # CPU time per job summed over every process involved: independent of other load on the
        # machine, so cores / cpu_per_job is the throughput an otherwise idle machine would reach
        "cpu_ms_per_job": None if cpu0 is None or cpu1 is None or not cpu_visible else (cpu1 - cpu0) / n_jobs * 1000,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000, help="jobs for the throughput run (default 1000)")
    ap.add_argument("--latency-jobs", type=int, default=100, help="sequential jobs for latency (default 100)")
    ap.add_argument("--backends", default="local,process,docker", help="comma-separated backends (unavailable ones are reported and skipped)")
    ap.add_argument("--baseline-jobs", type=int, default=200, help="jobs for the plain-subprocess baseline throughput (default 200)")
    ap.add_argument("--local-workers", type=int, default=0, help="workers of the local backend (default: one per core)")
    ap.add_argument("--out", default="bench_results/sandbox.json", help="JSON output path")
    args = ap.parse_args()

    cores = os.cpu_count() or 1
    python = sandboxes.bwrap.python_install()[0] if hasattr(sandboxes, "bwrap") else sys.executable
    rows: dict[str, dict] = {}
    load0 = os.getloadavg()
    rows["subprocess python3 (baseline)"] = measure(lambda: baseline_run(python), min(args.latency_jobs, 50), args.baseline_jobs, cores)
    for name in [b for b in args.backends.split(",") if b]:
        avail = sandboxes.backend_spec(name).probe()
        if not avail.ok:
            rows[name] = {"unavailable": avail.reason}
            continue
        backend = sandboxes.make_backend(name, **({"workers": args.local_workers} if name == "local" and args.local_workers else {}))
        if hasattr(backend, "warm_up"):
            backend.warm_up()
        job = sandboxes.Job.make(PROGRAM)
        try:
            n = args.jobs if name == "local" else min(args.jobs, args.baseline_jobs)
            rows[name] = {**measure(lambda: backend.run(job).stdout, args.latency_jobs if name == "local" else min(args.latency_jobs, 50),
                                    n, backend.concurrency, backend,
                                    # a Docker job runs in the engine's processes, whose CPU time this process cannot see
                                    cpu_visible=name != "docker"), "info": {k: str(v) for k, v in backend.info().items()}}
        finally:
            backend.close()

    print(f"\nsandbox benchmark: {cores} cores, {platform.platform()}, program {PROGRAM.strip()!r}\n")
    print(f"load average before/after: {load0} / {os.getloadavg()} (other work on the machine slows every row)\n")
    print(f"{'backend':<32} {'jobs/s':>9} {'median ms':>10} {'p95 ms':>9} {'CPU ms/job':>11} {'idle-machine jobs/s':>20} {'jobs':>6} {'wrong':>6}")
    for name, r in rows.items():
        if "unavailable" in r:
            print(f"{name:<32} unavailable: {r['unavailable'][:90]}")
            continue
        cpu = r["cpu_ms_per_job"]
        projected = f"{cores * 1000 / cpu:.0f}" if cpu else "n/a"
        r["idle_machine_jobs_per_s"] = cores * 1000 / cpu if cpu else None
        print(f"{name:<32} {r['jobs_per_s']:>9.1f} {r['latency_median_ms']:>10.2f} {r['latency_p95_ms']:>9.2f} "
              f"{(f'{cpu:.2f}' if cpu else 'n/a'):>11} {projected:>20} {r['jobs']:>6} {r['wrong_outputs']:>6}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"cores": cores, "platform": platform.platform(), "program": PROGRAM, "results": rows,
                               "load_average": os.getloadavg()}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
