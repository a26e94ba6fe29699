#!/usr/bin/env python3
"""Grading time per problem on the two paths of the code environment, on HumanEval and MBPP test.

For each benchmark it loads the problems twice: as the task grades them (``tests="auto"``: literal
input/output pairs judged on the trusted side where the tests convert, the isolated tester
otherwise) and with every problem through the tester (``tests="program"``), then grades each
problem's reference solution:
- latency: one problem at a time (median and p95 milliseconds per problem, per path);
- throughput: all problems of a row in one ``grade_many`` batch (problems per second).
Every reference solution must pass (the script says so if one does not).

Prints a table and writes JSON (``--out``). Numbers depend on the machine and on what else runs
on it: compare rows of one invocation, not across runs.

    RLVR_DATA_DIR=../shared/data python scripts/bench_code_grading.py --backend local
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sandboxes  # noqa: E402
import tasks  # noqa: E402
from envs.code import grade, grade_many  # noqa: E402

BENCHMARKS = {"humaneval": ("humaneval-v1", "test"), "mbpp": ("mbpp-v1", "test")}


def measure(task, problems, backend, latency_n: int) -> dict:
    solutions = [task.solution(p) for p in problems]
    times, failed = [], []
    for p, s in list(zip(problems, solutions))[:latency_n]:
        t0 = time.perf_counter()
        v = grade(s, p.reference, backend=backend)
        times.append(time.perf_counter() - t0)
        if not v.passed:
            failed.append(p.id)
    t0 = time.perf_counter()
    verdicts = grade_many(solutions, [p.reference for p in problems], backend=backend)
    batch_s = time.perf_counter() - t0
    failed += [p.id for p, v in zip(problems, verdicts) if not v.passed]
    ms = sorted(1000 * t for t in times)
    return {"problems": len(problems), "latency_problems": len(ms), "median_ms": statistics.median(ms),
            "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))], "batch_problems_per_s": len(problems) / batch_s,
            "failed": sorted(set(failed))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", default="humaneval,mbpp")
    ap.add_argument("--backend", default="local")
    ap.add_argument("--latency-problems", type=int, default=1000, help="problems timed one by one per row (at most)")
    ap.add_argument("--out", default="runs/bench_code_grading.json")
    args = ap.parse_args()
    backend = sandboxes.make_backend(args.backend)
    rows = []
    try:
        for name in args.benchmarks.split(","):
            task_id, split = BENCHMARKS[name]
            for mode in ("auto", "program"):
                task = tasks.make(task_id, tests=mode)
                problems = task.problems(split)
                for path, kind in (("pairs", "function"), ("tester", "program")):
                    chosen = [p for p in problems if p.reference["kind"] == kind]
                    if chosen:
                        rows.append({"benchmark": name, "tests": mode, "path": path, **measure(task, chosen, backend, args.latency_problems)})
                        print(json.dumps(rows[-1]), flush=True)
    finally:
        backend.close()
    print(f"\nbackend {args.backend} ({backend.concurrency} workers), {platform.node()}, {platform.processor() or platform.machine()}")
    print("| benchmark | tests= | path | problems | median ms/problem | p95 ms | batch problems/s | reference failed |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['benchmark']} | {r['tests']} | {r['path']} | {r['problems']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | "
              f"{r['batch_problems_per_s']:.1f} | {len(r['failed'])} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"backend": args.backend, "workers": backend.concurrency, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
