"""Synchronous vs asynchronous training (docs/async.md): ``rollout.async.max_staleness`` = 0 (sync), 1,
2, 4 on the quickstart and on smollm2_arithmetic, the trainer and the generation worker pinned to
different cores, several seeds. Reports, per task and mode: trained samples per second (and the
speed-up over sync), wall time until held-out accuracy first reaches a target, the final held-out
accuracy at equal samples with a 95% interval over seeds (and each run's Wilson interval over its
evaluation problems), and the staleness histogram of every trained sample. Samples per second are
the trained completions over the steps' wall time after the first step (which waits for the worker to
start); ``samples_per_s_all_steps`` in the JSON counts every step.

    python scripts/bench_async.py --base runs/quickstart/sft/final --out bench_results/async
    python scripts/bench_async.py --base runs/quickstart/sft/final --dry-run     # 2 steps, 1 seed: plumbing only

Pinning: the synchronous run gets both cores (``taskset -c T,W``, ``threads=2``: the same machine
the asynchronous run has); an asynchronous run's trainer is started under ``taskset -c T`` with one
thread and its worker pinned to core W (``rollout.async.worker_cpus=[W]``). ``--sync-one-core``
adds a synchronous row on core T alone. On a GPU machine the same comparison runs against a
``rlvr rollout serve`` on other GPUs: ``--engine vllm_server --server-url URL --no-pin``.

Runs are written under ``OUT/runs/TASK/MODE/seed-S`` (an existing one is reused unless
``--rerun``), the table to stdout and everything to ``OUT/bench_async.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TASKS = {"quickstart": "quickstart", "smollm2_arithmetic": "smollm2_arithmetic"}
QUIET = ["log.progress=false", "log.tensorboard=false", "log.plot=false", "overwrite=true"]
DRY = ["update.steps=2", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.chunk_prompts=2", "rollout.max_new_tokens=16",
       "eval.every=1", "eval.limit=4", "eval.max_new_tokens=16", "log.checkpoint_every=0", "optim.warmup_steps=0"]
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mode_name(k: int, one_core: bool = False) -> str:
    return ("sync-1core" if one_core else "sync") if k == 0 else f"async-k{k}"


def command(args: argparse.Namespace, task: str, k: int, seed: int, out: Path, one_core: bool = False) -> list[str]:
    """The `rlvr train` command of one run, under taskset when pinning."""
    overrides = [f"output_dir={out.parent}", f"name={out.name}", f"seed={seed}", *QUIET]
    if task == "quickstart":
        overrides.append(f"model.name_or_path={args.base}")
    if args.steps:
        overrides.append(f"update.steps={args.steps}")
    if args.eval_every:
        overrides.append(f"eval.every={args.eval_every}")
    if args.engine != "hf":
        overrides += [f"rollout.engine={args.engine}", f"rollout.vllm.server_url={args.server_url}"]
    overrides += ["eval.at_start=true", *(DRY if args.dry_run else []), *args.set]
    cpus = None
    if k:
        overrides += [f"rollout.async.max_staleness={k}", "threads=1"]
        if not args.no_pin:
            overrides.append(f"rollout.async.worker_cpus=[{args.worker_cpu}]")
            cpus = str(args.trainer_cpu)
    elif one_core:
        overrides.append("threads=1")
        cpus = None if args.no_pin else str(args.trainer_cpu)
    else:
        overrides.append("threads=1" if args.no_pin else "threads=2")
        cpus = None if args.no_pin else f"{args.trainer_cpu},{args.worker_cpu}"
    cmd = [sys.executable, "-m", "rlvr.cli", "train", TASKS[task], *overrides]
    return (["taskset", "-c", cpus] if cpus else []) + cmd


def run(cmd: list[str], out: Path, rerun: bool) -> dict:
    """Run one training (or reuse a finished one); its wall time and rows."""
    record = out / "bench_run.json"
    if record.is_file() and not rerun:
        return json.loads(record.read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    print("$", " ".join(cmd), flush=True)
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({out}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    result = {"command": cmd, "start": t0, "wall_s": wall, "rows": rows}
    record.write_text(json.dumps(result))
    return result


def wilson(p: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% t-interval over seeds (the interval is the mean itself with one seed)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, m, m
    half = T_975.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


def summarise(result: dict, eval_n: int) -> dict:
    """One run's numbers from its metrics rows."""
    rows = [r for r in result["rows"] if r.get("step", 0) > 0]
    evals = [(r["step"], r["time"] - result["start"], r["eval/accuracy"]) for r in result["rows"] if "eval/accuracy" in r]
    samples = sum(r.get("batch/groups", 0.0) for r in rows) * result["group_size"]  # the completions the policy trained on
    train_s = sum(r.get("time/step", 0.0) for r in rows)
    # steady state: without the first step, which waits for the worker's start-up (or the decoder measurement)
    later = rows[1:]
    later_s = sum(r.get("time/step", 0.0) for r in later)
    later_samples = sum(r.get("batch/groups", 0.0) for r in later) * result["group_size"]
    hist: dict[int, float] = {}
    for r in rows:
        for key, v in r.items():
            if key.startswith("async/staleness_hist/"):
                s = int(key.rsplit("/", 1)[1])
                hist[s] = hist.get(s, 0.0) + v
    final = evals[-1][2] if evals else float("nan")
    return {"steps": len(rows), "samples": samples, "train_s": train_s,
            "samples_per_s": later_samples / later_s if later_s else 0.0, "samples_per_s_all_steps": samples / train_s if train_s else 0.0,
            "wall_s": result["wall_s"], "evals": evals, "final_accuracy": final, "final_wilson": wilson(final, eval_n),
            "staleness_hist": dict(sorted(hist.items())),
            "trainer_idle_frac": statistics.fmean([r["async/trainer_idle_frac"] for r in rows if "async/trainer_idle_frac" in r] or [0.0]),
            "generator_idle_frac": statistics.fmean([r["async/generator_idle_frac"] for r in rows if "async/generator_idle_frac" in r] or [0.0])}


def time_to(evals: list[tuple[int, float, float]], target: float) -> float | None:
    return next((t for _, t, acc in evals if acc >= target), None)


def eval_size(task: str, args: argparse.Namespace) -> int:
    """Problems each evaluation scores (its limit), for the Wilson interval."""
    from rlvr.config import load_config
    from rlvr.train.config import TrainConfig

    cfg = load_config(TrainConfig, TASKS[task], [*(DRY if args.dry_run else []), *[s for s in args.set if s.startswith("eval.")]])
    if cfg.eval.limit:
        return cfg.eval.limit
    import tasks

    t = tasks.make(cfg.task.id, **cfg.task.config)
    return t.size(cfg.eval.split) or 0


def group_size(task: str, args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.train.config import TrainConfig

    return load_config(TrainConfig, TASKS[task], [*(DRY if args.dry_run else []), *[s for s in args.set if s.startswith("rollout.")]]).rollout.group_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="quickstart,smollm2_arithmetic", help="comma-separated: quickstart, smollm2_arithmetic")
    ap.add_argument("--staleness", default="0,1,2,4", help="comma-separated max_staleness values (0 = synchronous)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--base", help="the quickstart's SFT base (rlvr sft sft_quickstart: runs/quickstart/sft/final); needed for quickstart")
    ap.add_argument("--out", default="bench_results/async")
    ap.add_argument("--trainer-cpu", type=int, default=0)
    ap.add_argument("--worker-cpu", type=int, default=1)
    ap.add_argument("--no-pin", action="store_true", help="no taskset and no worker_cpus (a GPU machine)")
    ap.add_argument("--sync-one-core", action="store_true", help="also run synchronous training on the trainer's core alone")
    ap.add_argument("--steps", type=int, default=0, help="update.steps for every run (0: the config's)")
    ap.add_argument("--eval-every", type=int, default=0, help="eval.every (0: the config's)")
    ap.add_argument("--target", type=float, default=0.0, help="held-out accuracy for the time-to-target column (0: 0.9 x sync's final mean)")
    ap.add_argument("--engine", default="hf", choices=["hf", "vllm_server"])
    ap.add_argument("--server-url", default="http://127.0.0.1:8000")
    ap.add_argument("--set", nargs="*", default=[], help="more key=value overrides for every run")
    ap.add_argument("--rerun", action="store_true", help="run again even where a finished run is recorded")
    ap.add_argument("--dry-run", action="store_true", help="2 steps, 1 seed, tiny batches: checks that everything runs, measures nothing")
    args = ap.parse_args()
    tasks_ = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks_ if t not in TASKS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {unknown[0]!r} (known: {', '.join(TASKS)})")
    if "quickstart" in tasks_ and not args.base:
        raise SystemExit("--base is needed for the quickstart (build it with `rlvr sft sft_quickstart`)")
    seeds = [int(s) for s in args.seeds.split(",")][: 1 if args.dry_run else None]
    ks = [int(k) for k in args.staleness.split(",")]
    root = Path(args.out)
    report: dict = {"args": vars(args), "machine": {"cpus": os.cpu_count(), "affinity": sorted(os.sched_getaffinity(0))}, "tasks": {}}
    for task in tasks_:
        n_eval, G = eval_size(task, args), group_size(task, args)
        modes = [(k, False) for k in ks] + ([(0, True)] if args.sync_one_core else [])
        runs: dict[str, list[dict]] = {}
        for k, one_core in modes:
            name = mode_name(k, one_core)
            for seed in seeds:
                out = root / "runs" / task / name / f"seed-{seed}"
                result = run(command(args, task, k, seed, out, one_core), out, args.rerun)
                result["group_size"] = G
                runs.setdefault(name, []).append(summarise(result, n_eval))
        sync_final = [r["final_accuracy"] for r in runs.get("sync", [])]
        target = args.target or (0.9 * statistics.fmean(sync_final) if sync_final else 0.0)
        table = {}
        sync_speed = statistics.fmean([r["samples_per_s"] for r in runs["sync"]]) if "sync" in runs else None
        for name, rs in runs.items():
            speed = [r["samples_per_s"] for r in rs]
            acc = mean_interval([r["final_accuracy"] for r in rs])
            reach = [time_to(r["evals"], target) for r in rs]
            hist: dict[int, float] = {}
            for r in rs:
                for s, v in r["staleness_hist"].items():
                    hist[s] = hist.get(s, 0.0) + v
            table[name] = {"samples_per_s": statistics.fmean(speed), "samples_per_s_sd": statistics.stdev(speed) if len(speed) > 1 else 0.0,
                           "speedup": statistics.fmean(speed) / sync_speed if sync_speed else None,
                           "final_accuracy": acc, "final_wilson": [r["final_wilson"] for r in rs],
                           "samples": [r["samples"] for r in rs], "time_to_target_s": reach, "staleness_hist": dict(sorted(hist.items())),
                           "trainer_idle_frac": statistics.fmean([r["trainer_idle_frac"] for r in rs]),
                           "generator_idle_frac": statistics.fmean([r["generator_idle_frac"] for r in rs]), "runs": rs}
        report["tasks"][task] = {"target": target, "eval_problems": n_eval, "modes": table}
        print(f"\n{task}: {len(seeds)} seed(s), held-out accuracy on {n_eval} problems, target {target:.3f}")
        print(f"{'mode':<12} {'samples/s':>14} {'speed-up':>8} {'to target (s)':>16} {'final acc [95% CI]':>24} {'idle T/G':>10}  staleness")
        for name, row in table.items():
            reach = [t for t in row["time_to_target_s"] if t is not None]
            reached = f"{statistics.fmean(reach):.0f} ({len(reach)}/{len(seeds)})" if reach else f"- (0/{len(seeds)})"
            m, lo, hi = row["final_accuracy"]
            speedup = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
            hist = " ".join(f"{s}:{int(v)}" for s, v in row["staleness_hist"].items()) or "0:all"
            print(f"{name:<12} {row['samples_per_s']:>8.2f} ±{row['samples_per_s_sd']:<5.2f} {speedup:>8} {reached:>16} "
                  f"{m:>8.3f} [{lo:.3f}, {hi:.3f}] {row['trainer_idle_frac']:>4.2f}/{row['generator_idle_frac']:<4.2f}  {hist}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "bench_async.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\nwrote {root / 'bench_async.json'}" + ("  (dry run: the numbers measure nothing)" if args.dry_run else ""))


if __name__ == "__main__":
    main()
