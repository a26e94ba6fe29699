"""Time in the Python tool: latency of one call and throughput of a batch of episodes' calls.

    python scripts/bench_tool_calls.py [--calls 256] [--backend auto]

Runs the math-code environment's step function (a sandboxed `print(a*b)`, as the tool task's
episodes do) for ``--calls`` episodes at once through `envs.episode.StepRunner`, as
`rlvr.rollout.episodes.run_episodes` does each turn, and one after another; prints a table and
writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from envs.episode import StepRunner, Turn
from envs.math_code import MathCodeEnv
from envs.types import Problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=256)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="runs/bench/tool_calls.json")
    args = ap.parse_args()

    env = MathCodeEnv(backend=args.backend)
    problem = Problem("bench", "", "0")
    items = [(problem, (Turn.model(f"```python\nprint({48213 + i}*{7719 + i})\n```\n"),)) for i in range(args.calls)]
    runner = StepRunner()
    runner.run(env, items[:8], 60)  # start the sandbox workers

    t = time.perf_counter()
    batch = runner.run(env, items, 600)
    batch_s = time.perf_counter() - t
    t = time.perf_counter()
    serial = [runner.run(env, [item], 60)[0] for item in items[: min(64, args.calls)]]
    serial_s = time.perf_counter() - t
    runner.close()

    walls = sorted(1000 * o.result.calls[0].latency_s for o in serial)
    sandbox = [1000 * o.result.calls[0].wall_s for o in serial]
    failed = sum(o.result.calls[0].failed for o in batch + serial)
    result = {
        "backend": env.tool._backend().name,
        "calls": args.calls,
        "call_ms_median": statistics.median(walls),
        "sandbox_ms_median": statistics.median(sandbox),
        "call_ms_p99": walls[min(len(walls) - 1, int(0.99 * len(walls)))],
        "serial_calls_per_s": len(serial) / serial_s,
        "batch_calls_per_s": args.calls / batch_s,
        "batch_s": batch_s,
        "failed_calls": failed,
    }
    print(f"| backend | call median (ms) | call p99 (ms) | program in sandbox median (ms) | calls/s one at a time | calls/s {args.calls} episodes at once | failed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {result['backend']} | {result['call_ms_median']:.1f} | {result['call_ms_p99']:.1f} | {result['sandbox_ms_median']:.1f} | {result['serial_calls_per_s']:.0f} | "
          f"{result['batch_calls_per_s']:.0f} | {failed} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
