#!/usr/bin/env python
"""Every algorithm preset from the same SFT base, with the same budget, over several seeds.

Each (preset, seed) trains through `rlvr train` in its own process (``--jobs`` at a time), with the
same torch thread count; held-out accuracy (greedy, validation split) is measured every
``--eval-every`` steps, and the final model is evaluated once more on the test split with
`rlvr eval`, whose per-problem predictions make the comparison paired: for every preset the
difference to the reference preset (``--reference``, GRPO) is bootstrapped over seeds and problems.

Reported per preset: final test accuracy (mean over seeds and its 95% t-interval), the paired
difference to the base model and to the reference with their 95% intervals (significant when they exclude 0), training
wall-clock, completions generated, optimizer steps, models in memory and peak process memory
(`resources.json`). The plot shows held-out accuracy (mean over seeds, 95% band) against steps,
wall-clock and completions, and peak memory.

    python scripts/compare_algos.py                         # builds the SFT base and the DPO pairs first
    python scripts/compare_algos.py --presets grpo,dapo,ppo --seeds 0,1,2

The default task is the 3-digit variant of arithmetic-v1, where the embedded model learns slowly
enough that the methods have not converged by the first evaluation (on the 2-digit quickstart task
every preset reaches its plateau within 5 steps). Runs whose final report exists are reused unless
``--fresh``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from rlvr.plots import read_metrics

REPO = Path(__file__).resolve().parents[1]
TASK_CONFIG = {"min_digits": 3, "max_digits": 3, "mul_max_digits": 1, "direct_frac": 0.5}
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def rlvr(*argv: str, threads: int, log: Path) -> None:
    """``rlvr ARGV...`` in a subprocess with ``threads`` torch threads; its output goes to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-m", "rlvr.cli", *argv], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"rlvr {' '.join(argv[:2])} failed (exit {proc.returncode}); see {log}:\n{log.read_text()[-3000:]}")


def build_base(out: Path, args: argparse.Namespace) -> Path:
    final = out / "base" / "final"
    if not final.is_dir():
        print("building the SFT base", flush=True)
        rlvr("sft", "sft_quickstart", f"output_dir={out}", "name=base", "overwrite=true", f"threads={args.threads}",
             f"task.config={json.dumps(args.task_config)}", f"eval.max_new_tokens={args.max_new_tokens}", "log.progress=false",
             threads=args.threads, log=out / "base.log")
    return final


def build_pairs(base: Path, out: Path, args: argparse.Namespace) -> Path:
    """Offline DPO's pairs, sampled once from the base (enough prompts for every step)."""
    pairs = out / "pairs.jsonl"
    if not pairs.exists():
        print("building DPO pairs from the base", flush=True)
        # as many sampled completions as an online preset generates in the whole run (the same budget)
        rlvr("pairs", "build", "--model", str(base), "--task", "arithmetic-v1", "--task-config", json.dumps(args.task_config),
             "--n", "8", "--prompts", str(args.steps * args.prompts), "--pairs-per-group", "2",
             "--max-new-tokens", str(args.max_new_tokens), "--seed", "0", "--out", str(pairs), "--threads", str(args.threads),
             "--overwrite", threads=args.threads, log=out / "pairs.log")
    return pairs


def test_eval(model: Path, out_dir: Path, log: Path, args: argparse.Namespace) -> float:
    """Greedy accuracy of ``model`` on the task's frozen test split (`rlvr eval`, cached in ``out_dir``)."""
    report = out_dir / "report.json"
    if not report.exists() or args.fresh:
        rlvr("eval", "--model", str(model), "--task", "arithmetic-v1", "--task-config", json.dumps(args.task_config),
             "--split", "test", "--max-new-tokens", str(args.max_new_tokens), "--out", str(out_dir), threads=args.threads, log=log)
    return json.loads(report.read_text())["greedy"]["accuracy"]


def run(preset: str, seed: int, base: Path, pairs: Path | None, out: Path, args: argparse.Namespace) -> Path:
    """Train ``preset`` with ``seed`` and evaluate its final model on the test split."""
    run_dir = out / f"{preset}-s{seed}"
    report = run_dir / "test_eval" / "report.json"
    if report.exists() and not args.fresh:
        return run_dir
    overrides = [
        f"output_dir={out}", f"name={run_dir.name}", "overwrite=true", f"model.name_or_path={base}", f"algo.preset={preset}",
        f"seed={seed}", f"threads={args.threads}", f"update.steps={args.steps}", f"rollout.prompts_per_step={args.prompts}",
        f"rollout.max_new_tokens={args.max_new_tokens}", f"task.config={json.dumps(args.task_config)}",
        f"eval.every={args.eval_every}", "eval.at_start=true", "eval.split=validation", "log.checkpoint_every=0",
        "log.tensorboard=false", "log.progress=false", *(f"pairs.path={pairs}" for _ in [0] if pairs and preset == "dpo"),
        *args.override,
    ]
    t = time.perf_counter()
    rlvr("train", "quickstart", *overrides, threads=args.threads, log=out / f"{run_dir.name}.log")
    test_eval(run_dir / "final", run_dir / "test_eval", out / f"{run_dir.name}.eval.log", args)
    print(f"{preset} seed {seed}: {time.perf_counter() - t:.0f} s", flush=True)
    return run_dir


def correct_by_problem(eval_dir: Path) -> dict[str, bool]:
    """Whether each test problem was answered right (greedy), from `rlvr eval`'s predictions."""
    rows = map(json.loads, (eval_dir / "predictions.jsonl").read_text().splitlines())
    return {p["id"]: p["greedy"][0]["reward"] > 0 for p in rows}


def one_run(run_dir: Path, epochs_minibatches: int, sampled_before: int = 0) -> dict:
    """Curves (held-out accuracy by step, seconds, completions, optimizer steps), the test
    predictions and the resources of one run; ``sampled_before`` completions were generated before
    training (offline DPO's pairs) and count towards its budget."""
    clock = opt_steps = 0.0
    completions = float(sampled_before)
    curve = []
    group_size = yaml.safe_load((run_dir / "config.yaml").read_text())["rollout"]["group_size"]
    for r in read_metrics(run_dir / "metrics.jsonl"):
        clock += r.get("time/step", 0.0)
        completions += r.get("sampling/prompts", 0.0) * group_size
        opt_steps += 0 if r.get("train/skipped") else epochs_minibatches * (r.get("step", 0) > 0)
        if "eval/accuracy" in r:
            curve.append({"step": r["step"], "train_s": clock, "completions": completions, "optimizer_steps": opt_steps,
                          "accuracy": r["eval/accuracy"]})
    resources = json.loads((run_dir / "resources.json").read_text())
    return {"curve": curve, "correct": correct_by_problem(run_dir / "test_eval"),
            "test_accuracy": json.loads((run_dir / "test_eval" / "report.json").read_text())["greedy"]["accuracy"],
            "peak_rss_mb": resources["peak_rss_bytes"] / 2**20, "models_in_memory": resources["models_in_memory"],
            "parameters": resources["parameters_total"], "optimizer_state_mb": sum(resources["optimizer_state_bytes"].values()) / 2**20,
            "train_s": clock, "completions": completions, "optimizer_steps": opt_steps}


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval (0 for one value)."""
    m = statistics.fmean(xs)
    return m, (T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0)


def paired_difference(runs: list[dict], ref_runs: list[dict], draws: int = 2000) -> tuple[float, float, float]:
    """Difference of test accuracy to the reference runs, paired by seed and problem, with a 95%
    interval from a two-level bootstrap: seeds resampled, then problems (the same problems for
    every seed of a draw), so both the training noise between seeds and the sampling of problems
    are in the interval."""
    seeds = list(range(min(len(runs), len(ref_runs))))
    ids = sorted(runs[0]["correct"])
    diff = [[float(runs[s]["correct"][i]) - float(ref_runs[s]["correct"][i]) for i in ids] for s in seeds]
    point = statistics.fmean(statistics.fmean(d) for d in diff)
    rng = random.Random(0)
    boot = []
    for _ in range(draws):
        chosen = [diff[rng.randrange(len(seeds))] for _ in seeds]
        sample = [rng.randrange(len(ids)) for _ in ids]
        boot.append(statistics.fmean(statistics.fmean(d[j] for j in sample) for d in chosen))
    boot.sort()
    return point, boot[int(0.025 * draws)], boot[int(0.975 * draws) - 1]


def summarise(preset: str, runs: list[dict], ref_runs: list[dict] | None, base_run: dict) -> dict:
    acc, half = mean_ci([r["test_accuracy"] for r in runs])
    before = statistics.fmean(r["curve"][0]["accuracy"] for r in runs)
    out = {"preset": preset, "seeds": len(runs), "test_accuracy": acc, "ci95": half, "validation_before": before,
           "train_s": statistics.fmean(r["train_s"] for r in runs), "completions": statistics.fmean(r["completions"] for r in runs),
           "optimizer_steps": statistics.fmean(r["optimizer_steps"] for r in runs),
           "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "models_in_memory": runs[0]["models_in_memory"],
           "parameters": runs[0]["parameters"], "optimizer_state_mb": runs[0]["optimizer_state_mb"],
           "curves": [r["curve"] for r in runs]}
    if ref_runs is not None:
        d, lo, hi = paired_difference(runs, ref_runs)
        out |= {"diff_vs_reference": d, "diff_ci95": [lo, hi], "significant": lo > 0 or hi < 0}
    d, lo, hi = paired_difference(runs, [base_run] * len(runs))  # what training changed, problem by problem
    out |= {"gain": d, "gain_ci95": [lo, hi], "gain_significant": lo > 0 or hi < 0}
    return out


def write_table(results: list[dict], out: Path, args: argparse.Namespace, base_accuracy: float) -> str:
    lines = [
        f"arithmetic-v1 with {json.dumps(args.task_config)}, from an SFT base at {base_accuracy:.3f} greedy test accuracy: "
        f"{args.steps} steps x {args.prompts} prompts x 8 completions, "
        f"seeds {','.join(map(str, args.seeds))}, {args.jobs} run(s) at a time with {args.threads} thread(s) each. Test accuracy: greedy, 500 problems, mean over "
        f"seeds with its 95% t-interval; the differences to the base and to {args.reference} are paired by seed and problem (95% two-level bootstrap: seeds, then problems).",
        "",
        "| preset | test accuracy | Δ vs base (pts) | Δ vs " + args.reference + " (pts) | significant | train s | completions "
        "| optimizer steps | models in memory | parameters | optimizer state MB | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        diff = (f"{100 * r['diff_vs_reference']:+.1f} [{100 * r['diff_ci95'][0]:+.1f}, {100 * r['diff_ci95'][1]:+.1f}]"
                if "diff_vs_reference" in r and r["preset"] != args.reference else "—")
        sig = ("yes" if r.get("significant") else "no") if r["preset"] != args.reference and "significant" in r else "—"
        gain = f"{100 * r['gain']:+.1f} [{100 * r['gain_ci95'][0]:+.1f}, {100 * r['gain_ci95'][1]:+.1f}]"
        lines.append(f"| {r['preset']} | {r['test_accuracy']:.3f} ± {r['ci95']:.3f} | {gain} | {diff} | {sig} | {r['train_s']:.0f} "
                     f"| {r['completions']:.0f} | {r['optimizer_steps']:.0f} | {r['models_in_memory']} | {r['parameters'] / 1e6:.1f}M "
                     f"| {r['optimizer_state_mb']:.1f} | {r['peak_rss_mb']:.0f} |")
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return table


def plot(results: list[dict], png: Path, base_accuracy: float, reference: str) -> None:
    """Final test accuracy per preset (mean over seeds, 95% t-interval, the base as a line), and
    held-out accuracy during training (means over seeds) against steps, wall-clock and completions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(22, 5.2), gridspec_kw={"width_ratios": [1.1, 1, 1, 1]})
    colors = plt.cm.tab20.colors
    order = sorted(results, key=lambda r: r["test_accuracy"])
    ax = axes[0]
    for y, r in enumerate(order):
        ax.errorbar(r["test_accuracy"], y, xerr=r["ci95"], fmt="o", color=colors[results.index(r) % 20], capsize=3)
    ax.axvline(base_accuracy, color="grey", ls=":", label=f"SFT base {base_accuracy:.3f}")
    ref = next((r for r in results if r["preset"] == reference), None)
    if ref is not None:
        ax.axvline(ref["test_accuracy"], color="black", ls="--", lw=0.8, label=f"{reference} {ref['test_accuracy']:.3f}")
    ax.set_yticks(range(len(order)), [r["preset"] for r in order])
    ax.set_xlabel("test accuracy after training (greedy, 500 problems)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    for i, r in enumerate(results):
        curves = r["curves"]
        n = min(len(c) for c in curves)
        mean = [statistics.fmean(c[k]["accuracy"] for c in curves) for k in range(n)]
        for ax, key in zip(axes[1:], ("step", "train_s", "completions")):
            xs = [statistics.fmean(c[k][key] for c in curves) for k in range(n)]
            ax.plot(xs, mean, marker="o", ms=3, label=r["preset"], color=colors[i % 20], ls="-" if i < 10 else "--")
    for ax, label in zip(axes[1:], ("step", "training wall-clock (s)", "completions generated")):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylabel("held-out accuracy during training (greedy, validation; mean over seeds)")
    axes[3].legend(fontsize=7, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle("Every preset from the same SFT base with the same budget")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> int:
    from rlvr.algos.presets import PRESETS, AlgoConfig, resolve_algorithm

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", default="runs/compare_algos")
    ap.add_argument("--base", default=None, help="SFT base model (default: build one with sft_quickstart on the task config)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated presets (default: all)")
    ap.add_argument("--reference", default="grpo", help="the preset every other is compared with")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step (rollout.prompts_per_step)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--task-config", default=json.dumps(TASK_CONFIG), help="arithmetic-v1 config (YAML/JSON)")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (each with --threads threads); timings are comparable "
                    "only within one setting")
    ap.add_argument("--fresh", action="store_true", help="rerun runs that already have results")
    ap.add_argument("--override", action="append", default=[], help="extra key=value for every run (repeatable)")
    args = ap.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.task_config = yaml.safe_load(args.task_config)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        ap.error(f"unknown preset(s) {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    base = Path(args.base) if args.base else build_base(out, args)
    pairs = build_pairs(base, out, args) if "dpo" in presets else None
    jobs = [(preset, seed) for seed in args.seeds for preset in presets]  # seed-major: an early look covers every preset
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each run is its own process
        run_dirs = dict(zip(jobs, pool.map(lambda job: run(job[0], job[1], base, pairs, out, args), jobs)))
    runs: dict[str, list[dict]] = {}
    for preset in presets:
        algo = resolve_algorithm(AlgoConfig(preset=preset))
        sampled = args.steps * args.prompts * 8 if preset == "dpo" else 0
        runs[preset] = [one_run(run_dirs[preset, seed], algo.epochs_per_batch * algo.minibatches, sampled) for seed in args.seeds]
    ref = runs.get(args.reference)
    base_accuracy = test_eval(base, out / "base_test_eval", out / "base.eval.log", args)
    base_run = {"correct": correct_by_problem(out / "base_test_eval")}
    results = [summarise(p, runs[p], ref, base_run) for p in presets]
    print()
    print(write_table(results, out, args, base_accuracy))
    plot(results, out / "compare_algos.png", base_accuracy, args.reference)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'} and {out / 'compare_algos.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
