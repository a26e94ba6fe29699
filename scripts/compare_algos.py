#!/usr/bin/env python
"""Every algorithm preset on the embedded arithmetic task, from the same SFT base, with the same
budget (training steps, prompts per step, group size, learning rate) and seed, through the same
`rlvr train` command. Held-out accuracy (greedy, the frozen test split) is measured every
``--eval-every`` steps; the script writes a Markdown table, JSON and a plot of held-out accuracy
against training wall-clock and against steps.

    python scripts/compare_algos.py                       # builds the SFT base first (~2.5 min)
    python scripts/compare_algos.py --base runs/quickstart/sft/final --presets grpo,dapo

Each preset runs in its own process, one after the other, with the same torch thread count.
Wall-clock is the training time of the steps (generation, verification, update), without the
held-out evaluations. Runs whose `metrics.jsonl` already reaches ``--steps`` are reused unless
``--fresh``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_base(out: Path, threads: int) -> Path:
    from rlvr.config import load_config
    from rlvr.train.sft import SFTConfig, sft

    final = out / "sft" / "final"
    if (final / "config.json").exists():
        return final
    cfg = load_config(SFTConfig, "sft_quickstart", [f"output_dir={out}", "name=sft", f"threads={threads}", "log.tensorboard=false", "overwrite=true"])
    return sft(cfg)


def run_preset(preset: str, base: Path, out: Path, args: argparse.Namespace) -> Path:
    run = out / preset
    rows = _rows(run)
    if not args.fresh and any(r.get("step") == args.steps and "eval/accuracy" in r for r in rows):
        print(f"{preset}: reusing {run}")
        return run
    overrides = [
        f"output_dir={out}", f"name={preset}", f"model.name_or_path={base}", f"algo.preset={preset}", f"seed={args.seed}",
        f"threads={args.threads}", f"update.steps={args.steps}", f"update.minibatches={args.minibatches}",
        f"eval.every={args.eval_every}", "eval.at_start=true", "eval.split=test", "log.checkpoint_every=0",
        "log.tensorboard=false", "log.progress=false", "overwrite=true", *args.override,
    ]
    cmd = [sys.executable, "-m", "rlvr.cli", "train", "quickstart", *overrides]
    print(f"{preset}: {' '.join(cmd[2:])}", flush=True)
    t = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{preset} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    print(f"{preset}: done in {time.perf_counter() - t:.0f} s", flush=True)
    return run


def _rows(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def summarise(preset: str, run: Path) -> dict:
    """Held-out accuracy by step and by cumulative training seconds, and per-step costs."""
    rows = _rows(run)
    clock, curve = 0.0, []
    for r in rows:
        clock += r.get("time/step", 0.0)
        if "eval/accuracy" in r:
            curve.append({"step": r["step"], "train_s": clock, "accuracy": r["eval/accuracy"]})
    steps = [r for r in rows if "time/step" in r]
    mean = lambda key: sum(r.get(key, 0.0) for r in steps) / max(len(steps), 1)  # noqa: E731
    return {
        "preset": preset,
        "before": curve[0]["accuracy"], "after": curve[-1]["accuracy"], "best": max(c["accuracy"] for c in curve),
        "train_s": clock, "step_s": mean("time/step"), "generate_s": mean("time/generate"), "train_update_s": mean("time/train"),
        "prompts_per_step": mean("sampling/prompts"), "zero_variance_frac": mean("groups/zero_variance_frac"),
        "batch_zero_variance_frac": mean("batch/zero_variance_frac"), "skipped_steps": sum(r.get("train/skipped", 0) for r in steps),
        "curve": curve,
    }


def write_table(results: list[dict], out: Path, args: argparse.Namespace) -> str:
    lines = [
        f"Held-out greedy accuracy on arithmetic-v1 test (500 frozen problems), {args.steps} steps x "
        f"{args.prompts} prompts x 8 completions, {args.minibatches} optimizer steps per batch, seed {args.seed}, "
        f"{args.threads} thread(s).",
        "",
        "| preset | before | after | gain (pts) | best | train s | s/step | prompts/step | zero-var groups generated | in batch |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {r['preset']} | {r['before']:.3f} | {r['after']:.3f} | {100 * (r['after'] - r['before']):+.1f} | {r['best']:.3f} "
                     f"| {r['train_s']:.0f} | {r['step_s']:.2f} | {r['prompts_per_step']:.1f} | {r['zero_variance_frac']:.2f} "
                     f"| {r['batch_zero_variance_frac']:.2f} |")
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return table


def plot(results: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for r in results:
        xs_t = [c["train_s"] for c in r["curve"]]
        xs_s = [c["step"] for c in r["curve"]]
        ys = [c["accuracy"] for c in r["curve"]]
        line, = axes[0].plot(xs_t, ys, marker="o", ms=3, label=r["preset"])
        axes[1].plot(xs_s, ys, marker="o", ms=3, color=line.get_color(), label=r["preset"])
    axes[0].set_xlabel("training wall-clock (s)")
    axes[1].set_xlabel("step")
    axes[0].set_ylabel("held-out accuracy (greedy)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(loc="lower right", fontsize=8)
    fig.suptitle("Algorithm presets on arithmetic-v1, same SFT base, budget and seed")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> int:
    from rlvr.algos.presets import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", default="runs/compare_algos")
    ap.add_argument("--base", default=None, help="SFT base model (default: build one with sft_quickstart)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated presets (default: all)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (rollout.prompts_per_step)")
    ap.add_argument("--minibatches", type=int, default=2,
                    help="optimizer steps per rollout batch; >1 makes the later ones off-policy, so ratios and clipping matter")
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fresh", action="store_true", help="rerun presets that already have results")
    ap.add_argument("--override", action="append", default=[], help="extra key=value for every run (repeatable)")
    args = ap.parse_args()
    args.override = [f"rollout.prompts_per_step={args.prompts}", *args.override]

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        ap.error(f"unknown preset(s) {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    base = Path(args.base) if args.base else build_base(out, args.threads)
    results = [summarise(p, run_preset(p, base, out, args)) for p in presets]
    print()
    print(write_table(results, out, args))
    plot(results, out / "compare_algos.png")
    print(f"wrote {out / 'results.md'}, {out / 'results.json'} and {out / 'compare_algos.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
