#!/usr/bin/env python
"""How long the asynchronous run's generation worker (`rlvr.rollout.worker.ProcessEngine`, ``rollout.engine=hf``)
takes to start and to restart after a death: forked from the fork server that imported torch and
transformers once (`worker_context`, what rlvr does), against a spawned process that imports them again
each time (what rlvr did before 2026-12-01; the slots are `FlatSlot`s both ways, which rlvr's spawned
workers did not have: they received one file descriptor per tensor, passed at the start).

Each way runs in a fresh Python process of its own, alternately, ``--repeats`` times: load the model,
stage its weights in shared memory (the run's slots), start the worker, restart it ``--restarts``
times, generate once to prove it works. The times are the trainer's wait until the worker says it is
ready, the model copy included. Prints a table; ``--record NAME`` also writes ``records/NAME.json``.

    python scripts/bench_worker_start.py                           # SmolLM2-135M-Instruct, 3 restarts, 2 repeats
    python scripts/bench_worker_start.py --model runs/quickstart/sft/final
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

WAYS = ("forkserver", "spawn")


def measure(model_name: str, way: str, restarts: int) -> dict:
    """In this process: start and restart one worker the given way; the seconds each took."""
    import torch

    from rlvr.models.loading import load_model
    from rlvr.rollout import worker
    from rlvr.rollout.base import SamplingParams

    if way == "spawn":  # what rlvr did before the fork server: every start imports torch and transformers again
        worker.worker_context = lambda *modules: torch.multiprocessing.get_context("spawn")
    torch.set_num_threads(1)
    model, tok = load_model(model_name)
    slots = worker.WeightSlots(model, 3)  # max_staleness=1: the lag + 2 slots an asynchronous run stages
    began = time.perf_counter()
    engine = worker.ProcessEngine(model, tok, slots, worker.WorkerSettings(decode="kv", threads=1))
    first = time.perf_counter() - began
    again = []
    for _ in range(restarts):
        began = time.perf_counter()
        engine.restart()
        again.append(time.perf_counter() - began)
    engine.load_weights(slots.slots[0])
    out = engine.generate_ids([tok("Compute 12+30.")["input_ids"]], 2, SamplingParams(temperature=1.0, max_new_tokens=8, seed=1))
    engine.close()
    return {"first_s": first, "restart_s": again, "completions": len(out), "tensors": len(slots.slots[0])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--model", default="smollm2-135m-instruct", help="a model folder, .gguf file or built-in name")
    p.add_argument("--restarts", type=int, default=3, help="restarts after the first start, per process")
    p.add_argument("--repeats", type=int, default=2, help="processes per way, alternating")
    p.add_argument("--record", default=None, metavar="NAME", help="also write records/NAME.json (the figures the docs cite: rlvr.records)")
    p.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # (the child process: measure one way, print JSON)
    args = p.parse_args(argv)
    for name in ("restarts", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.one:
        print(json.dumps(measure(args.model, args.one, args.restarts)))
        return 0

    results: dict[str, list[dict]] = {way: [] for way in WAYS}
    for repeat in range(args.repeats):
        for way in WAYS if repeat % 2 == 0 else WAYS[::-1]:
            proc = subprocess.run([sys.executable, __file__, "--model", args.model, "--restarts", str(args.restarts), "--one", way],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"error: the {way} measurement failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                return 1
            results[way].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    first = {way: statistics.median(r["first_s"] for r in rs) for way, rs in results.items()}
    again = {way: statistics.median(s for r in rs for s in r["restart_s"]) for way, rs in results.items()}
    tensors = results["forkserver"][0]["tensors"]
    print(f"\n{args.model} ({tensors} tensors a slot, 3 slots), 1 thread; medians of {args.repeats} processes per way, "
          f"{args.restarts} restarts each\n")
    print("| worker | first start (s) | restart (s) |\n|---|---:|---:|")
    for way, label in (("forkserver", "forked from the fork server (rlvr)"), ("spawn", "spawned (before)")):
        print(f"| {label} | {first[way]:.2f} | {again[way]:.2f} |")
    print(f"\na restart {again['spawn'] / again['forkserver']:.1f}x faster")
    if args.record:
        from rlvr.records import write_record

        command = "python scripts/bench_worker_start.py " + " ".join(sys.argv[1:] if argv is None else argv)
        figures = {"forkserver_first_s": first["forkserver"], "forkserver_restart_s": again["forkserver"],
                   "spawn_first_s": first["spawn"], "spawn_restart_s": again["spawn"],
                   "restart_speedup": again["spawn"] / again["forkserver"], "tensors": float(tensors)}
        print(f"wrote {write_record(args.record, command, figures)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
