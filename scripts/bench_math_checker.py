#!/usr/bin/env python
"""Benchmark rlvr's math checker beside Hugging Face math-verify on a labelled suite.

    OMP_NUM_THREADS=1 python scripts/bench_math_checker.py [--pairs scripts/data/math_pairs.jsonl]
        [--checkers rlvr,math-verify] [--deadline 10] [--out bench_results/math_checker.json]

The suite (``scripts/data/math_pairs.jsonl``) has one labelled pair a line: ``id``, ``category``,
``gold``, ``response``, ``equivalent`` (mathematical truth: should the response be rewarded?)
and ``ambiguous`` (truth depends on a convention; excluded from accuracy, FP and FN). A response
may contain ``{{rep:TEXT:N}}``, expanded to TEXT repeated N times (megabyte inputs without a
megabyte file).

Each checker runs in its own worker process, one pair at a time; the harness enforces a hard
per-pair deadline (``--deadline``) by killing and restarting the worker, so no pair can stall the
run. Latency is measured inside the worker around the single check call (a killed pair counts its
deadline). Reported per checker and category: accuracy on unambiguous pairs, false positives,
false negatives, timeouts; overall median/p99/max latency and checks per second (pairs / summed
latency). rlvr's sympy workers are started before timing (``envs.math.warmup``), as a trainer's
are. Injection pairs try to create a marker file; the report says whether any checker did.

Numbers only: tests assert behaviour, this script measures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAIRS = ROOT / "scripts" / "data" / "math_pairs.jsonl"
MARKER = Path("/tmp/rlvr_pwned")
_REP = re.compile(r"\{\{rep:(.*?):(\d+)\}\}", re.S)


def load_pairs(path: Path) -> list[dict]:
    """The labelled pairs, templates expanded; raises ValueError naming the bad line."""
    pairs = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                pair = {k: row[k] for k in ("id", "category", "gold", "response", "equivalent", "ambiguous")}
            except (ValueError, KeyError) as e:
                raise ValueError(f"{path}:{lineno}: malformed pair ({e})") from None
            pair["response"] = _REP.sub(lambda m: m.group(1) * int(m.group(2)), pair["response"])
            pairs.append(pair)
    return pairs


# -- worker side ------------------------------------------------------------------------------

def _rlvr_checker():
    from envs.math import check, warmup

    warmup()

    def run(gold: str, response: str) -> tuple[bool, str]:
        v = check(response, gold)
        return v.passed, v.status.value

    return run


def _math_verify_checker():
    from math_verify import parse, verify

    def run(gold: str, response: str) -> tuple[bool, str]:
        g = gold if gold.strip().startswith("$") else f"${gold}$"  # math-verify's documented gold form
        return bool(verify(parse(g), parse(response))), "ok"

    return run


CHECKERS = {"rlvr": _rlvr_checker, "math-verify": _math_verify_checker}


def worker(name: str, pairs_path: str) -> None:
    """Answer ``index`` lines on stdin with one JSON result line each."""
    pairs = load_pairs(Path(pairs_path))
    run = CHECKERS[name]()
    print("ready", flush=True)
    for line in sys.stdin:
        k = int(line)
        pair = pairs[k]
        t0 = time.perf_counter()
        try:
            passed, status = run(pair["gold"], pair["response"])
        except Exception as e:  # a checker crash is a failed check, reported as such
            passed, status = False, f"error: {type(e).__name__}"
        dt = time.perf_counter() - t0
        print(json.dumps({"k": k, "passed": passed, "status": status, "latency_s": dt}), flush=True)


# -- harness side -----------------------------------------------------------------------------

class Runner:
    """A worker process for one checker, restarted after a kill."""

    def __init__(self, name: str, pairs_path: Path):
        self.name, self.pairs_path = name, pairs_path
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", self.name, "--pairs", str(self.pairs_path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if line.strip() != "ready":
            raise SystemExit(f"{self.name} worker failed to start (is it installed? try: pip install math-verify)")

    def check(self, k: int, deadline_s: float) -> dict:
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        t0 = time.perf_counter()
        self.proc.stdin.write(f"{k}\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], deadline_s)
        if ready:
            line = self.proc.stdout.readline()
            if line:
                return json.loads(line)
        self.kill()  # over the deadline (or died): kill it, the next pair gets a fresh worker
        self.restarts += 1
        return {"k": k, "passed": False, "status": "killed", "latency_s": max(deadline_s, time.perf_counter() - t0)}

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def summarise(pairs: list[dict], results: list[dict]) -> dict:
    cats: dict[str, dict] = {}
    for pair, res in zip(pairs, results):
        c = cats.setdefault(pair["category"], {"pairs": 0, "scored": 0, "correct": 0, "fp": 0, "fn": 0, "timeouts": 0})
        c["pairs"] += 1
        c["timeouts"] += res["status"] in ("timeout", "killed")
        if pair["ambiguous"]:
            continue
        c["scored"] += 1
        c["correct"] += res["passed"] == pair["equivalent"]
        c["fp"] += res["passed"] and not pair["equivalent"]
        c["fn"] += pair["equivalent"] and not res["passed"]
    total = {k: sum(c[k] for c in cats.values()) for k in ("pairs", "scored", "correct", "fp", "fn", "timeouts")}
    for c in [*cats.values(), total]:
        c["accuracy"] = c["correct"] / c["scored"] if c["scored"] else None
    lat = sorted(r["latency_s"] for r in results)
    total.update(
        median_ms=statistics.median(lat) * 1e3,
        p99_ms=lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))] * 1e3,
        max_ms=lat[-1] * 1e3,
        checks_per_s=len(lat) / sum(lat),
        over_1s=sum(x > 1.0 for x in lat),
    )
    return {"categories": cats, "total": total}


def print_table(summaries: dict[str, dict]) -> None:
    names = list(summaries)
    cats = list(next(iter(summaries.values()))["categories"])
    head = f"{'category':<14}{'pairs':>6}" + "".join(f"  {n + ' acc':>16}{'FP':>4}{'FN':>4}{'T/O':>4}" for n in names)
    print(head)
    print("-" * len(head))

    def row(label: str, stats: list[dict], pairs: int) -> str:
        out = f"{label:<14}{pairs:>6}"
        for s in stats:
            acc = "-" if s["accuracy"] is None else f"{100 * s['accuracy']:.1f}% ({s['correct']}/{s['scored']})"
            out += f"  {acc:>16}{s['fp']:>4}{s['fn']:>4}{s['timeouts']:>4}"
        return out

    for c in cats:
        print(row(c, [summaries[n]["categories"][c] for n in names], summaries[names[0]]["categories"][c]["pairs"]))
    print("-" * len(head))
    print(row("ALL", [summaries[n]["total"] for n in names], summaries[names[0]]["total"]["pairs"]))
    print()
    print(f"{'checker':<14}{'median ms':>11}{'p99 ms':>11}{'max ms':>11}{'checks/s':>11}{'>1 s':>6}{'restarts':>10}  code executed")
    for n in names:
        t = summaries[n]["total"]
        print(f"{n:<14}{t['median_ms']:>11.3f}{t['p99_ms']:>11.2f}{t['max_ms']:>11.1f}{t['checks_per_s']:>11.1f}{t['over_1s']:>6}{summaries[n]['restarts']:>10}  {'YES' if summaries[n]['executed_code'] else 'no'}")
    if len(names) == 2:
        a, b = (summaries[n]["total"]["checks_per_s"] for n in names)
        print(f"\nthroughput ratio {names[0]} / {names[1]}: {a / b:.1f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    ap.add_argument("--checkers", default="rlvr,math-verify", help="comma-separated: rlvr, math-verify")
    ap.add_argument("--deadline", type=float, default=10.0, help="hard per-pair deadline in seconds (worker killed past it)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench_results" / "math_checker.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, str(args.pairs))
        return 0

    pairs = load_pairs(args.pairs)
    names = [n.strip() for n in args.checkers.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECKERS]
    if unknown:
        raise SystemExit(f"unknown checker(s) {unknown}; choose from {sorted(CHECKERS)}")
    print(f"{len(pairs)} pairs ({sum(not p['ambiguous'] for p in pairs)} unambiguous) from {args.pairs}; deadline {args.deadline:g} s per pair\n")
    summaries: dict[str, dict] = {}
    per_pair: dict[str, list[dict]] = {}
    for name in names:  # one checker at a time: they never compete for the CPU
        MARKER.unlink(missing_ok=True)
        runner = Runner(name, args.pairs)
        runner.start()
        t0 = time.perf_counter()
        results = [runner.check(k, args.deadline) for k in range(len(pairs))]
        wall = time.perf_counter() - t0
        runner.kill()
        summary = summarise(pairs, results)
        summary.update(restarts=runner.restarts, wall_s=wall, executed_code=MARKER.exists())
        MARKER.unlink(missing_ok=True)
        summaries[name], per_pair[name] = summary, results
        print(f"{name}: done in {wall:.1f} s", file=sys.stderr)
    print_table(summaries)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "pairs_file": str(args.pairs), "pairs": len(pairs), "deadline_s": args.deadline, "summaries": summaries,
        "results": [
            {"id": p["id"], "category": p["category"], "equivalent": p["equivalent"], "ambiguous": p["ambiguous"],
             **{n: {k: per_pair[n][i][k] for k in ("passed", "status", "latency_s")} for n in names}}
            for i, p in enumerate(pairs)
        ],
    }
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
