#!/usr/bin/env python
"""Algorithm presets compared on a task, from the same starting model, at the same budget, over several seeds.

Each (preset, seed) trains through `rlvr train CONFIG` in its own process (``--jobs`` at a time, each
with ``--threads`` torch threads) until its budget is spent (``--budget``, see below); greedy accuracy
on the task's validation split is measured every ``--eval-every`` steps, and the final model is
evaluated once on the test split with `rlvr eval`. The comparison of the test evaluations is
`rlvr compare --arm` (`rlvr.eval.compare.compare_arms`): each preset's mean test accuracy over its
seeds with a 95% interval across seeds, and its difference to the reference preset (``--reference``)
and to the starting model, paired by problem within a seed and aggregated over seeds (95% two-level
bootstrap: seeds, then problems).

    python scripts/compare_algos.py --config sum_chain --presets grpo,dapo,dr_grpo,ppo --seeds 0,1,2 --budget completions=15360
    python scripts/compare_algos.py --config quickstart --task program-synthesis-v1 --model runs/ps/sft/final --budget seconds=300

The budget (`rlvr.train.budget`, ``budget.*`` keys of the config) is one of

- ``completions=N``: completions generated for training (DAPO and online DPO generate about 3x a
  GRPO step's, PRIME about 4x: they stop after fewer steps); offline DPO generates nothing while it
  trains, so the pairs it trains on are sampled from N / group_size prompts before it starts;
- ``steps=N``: optimizer steps of the policy (PPO takes 4 per batch: it stops after a quarter of the batches);
- ``seconds=N``: wall time of the training steps (evaluation not counted; compare only runs made
  with the same ``--jobs`` and ``--threads`` on the same machine).

Each run stops after the step that reaches its budget, so it may overrun by one step's worth; the
table reports what each run spent. ``--max-steps`` bounds every run (``update.steps``; default: the
steps a GRPO run needs for a completions budget, 2N for a steps budget, the config's for seconds).
With a budget, runs end at different steps, so the learning rate is held constant after warm-up
(``optim.schedule=constant``; ``--override optim.schedule=cosine`` restores the config's). Without
``--budget`` every run trains ``--max-steps`` steps (the config's ``update.steps`` by default).

The starting model is ``--model``; without it, the built-in SFT config for the task
(``sft_quickstart`` for arithmetic-v1, ``sft_sum_chain``, ``sft_code_quickstart``,
``sft_tool_products``) builds one first. Runs whose test evaluation exists are reused unless
``--fresh``; an output folder holding runs of other settings is refused.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
BUDGET_KEYS = {"completions": "budget.completions", "steps": "budget.optimizer_steps", "seconds": "budget.seconds"}


@dataclass(frozen=True)
class Budget:
    """``--budget KIND=AMOUNT``: KIND is completions, steps (optimizer steps) or seconds."""

    kind: str
    amount: float

    @classmethod
    def parse(cls, text: str) -> Budget:
        kind, sep, amount = text.partition("=")
        if not sep or kind not in BUDGET_KEYS:
            raise ValueError(f"--budget {text!r}: expected completions=N, steps=N or seconds=N")
        try:
            value = float(amount)
        except ValueError:
            raise ValueError(f"--budget {text!r}: {amount!r} is not a number") from None
        if value <= 0:
            raise ValueError(f"--budget {text!r}: the amount must be > 0")
        return cls(kind, value)

    @property
    def override(self) -> str:
        value = f"{self.amount:g}" if self.kind == "seconds" else str(int(math.ceil(self.amount)))
        return f"{BUDGET_KEYS[self.kind]}={value}"

    def describe(self) -> str:
        what = {"completions": "completions generated", "steps": "optimizer steps", "seconds": "seconds of training steps"}[self.kind]
        return f"{self.amount:g} {what}"


@dataclass(frozen=True)
class Settings:
    """What every run of the comparison shares (recorded in the output folder)."""

    config: str
    task: str
    task_config: dict
    model: str | None
    prompts: int
    group_size: int
    max_new_tokens: int
    prompt: dict
    budget: dict | None
    max_steps: int
    eval_every: int
    eval_limit: int | None
    test_limit: int | None
    overrides: list[str]

    @property
    def task_overrides(self) -> list[str]:
        return [f"task.id={self.task}", f"task.config={json.dumps(self.task_config)}"]


def rlvr(*argv: str, threads: int, log: Path) -> None:
    """``rlvr ARGV...`` in a subprocess with ``threads`` torch threads; its output goes to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore"}
    with log.open("w") as f:
        proc = subprocess.run([sys.executable, "-m", "rlvr.cli", *argv], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"rlvr {' '.join(argv[:2])} failed (exit {proc.returncode}); see {log}:\n{log.read_text()[-3000:]}")


def builtin_sft_configs(task: str) -> list[str]:
    """The built-in SFT configs (``recipe: sft``) that warm up a model on ``task``."""
    from rlvr.config import CONFIG_DIR

    found = []
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        data = yaml.safe_load(path.read_text()) or {}
        if data.get("recipe") == "sft" and (data.get("task") or {}).get("id") == task:
            found.append(path.stem)
    return found


def build_base(out: Path, settings: Settings, args: argparse.Namespace) -> Path:
    """The starting model: the built-in SFT config for the task, on the comparison's task config."""
    final = out / "base" / "final"
    if final.is_dir():
        return final
    configs = builtin_sft_configs(settings.task)
    if not configs:
        from rlvr.config import CONFIG_DIR

        sft = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if (yaml.safe_load(p.read_text()) or {}).get("recipe") == "sft")
        raise SystemExit(f"no built-in SFT config warms up a model on {settings.task} (built-in SFT configs: {', '.join(sft)}); "
                         "pass the starting model with --model")
    print(f"building the starting model with `rlvr sft {configs[0]}`", flush=True)
    rlvr("sft", configs[0], f"output_dir={out}", "name=base", "overwrite=true", f"threads={args.threads}",
         f"task.config={json.dumps(settings.task_config)}", "log.progress=false", "log.tensorboard=false", *args.sft_override,
         threads=args.threads, log=out / "base.log")
    return final


def prompt_flags(settings: Settings) -> list[str]:
    """The config's prompt settings as `rlvr eval` / `rlvr pairs build` flags, so they see what training saw."""
    p = settings.prompt
    flags = ["--prompt-format", p["format"]]
    if p.get("system") is not None:
        flags += ["--system", p["system"]]
    if p.get("instruction") is not None:
        flags += ["--instruction", p["instruction"]]
    return flags


def build_pairs(base: Path, out: Path, settings: Settings, args: argparse.Namespace) -> tuple[Path, int]:
    """Offline DPO's pairs, sampled once from the starting model; returns the file and the completions sampled."""
    pairs = out / "pairs.jsonl"
    budget = Budget(**settings.budget) if settings.budget else None
    prompts = (max(1, int(budget.amount) // settings.group_size) if budget and budget.kind == "completions"
               else settings.max_steps * settings.prompts)
    if not pairs.exists():
        print(f"sampling offline DPO's pairs from the starting model ({prompts} prompts x {settings.group_size})", flush=True)
        rlvr("pairs", "build", "--model", str(base), "--task", settings.task, "--task-config", json.dumps(settings.task_config),
             "--n", str(settings.group_size), "--prompts", str(prompts), "--pairs-per-group", "2",
             "--max-new-tokens", str(settings.max_new_tokens), "--seed", "0", "--out", str(pairs), "--threads", str(args.threads),
             "--overwrite", *prompt_flags(settings), threads=args.threads, log=out / "pairs.log")
    return pairs, prompts * settings.group_size


def test_eval(model: Path, out_dir: Path, log: Path, settings: Settings, args: argparse.Namespace) -> Path:
    """Greedy evaluation of ``model`` on the task's test split (`rlvr eval`, kept in ``out_dir``)."""
    if not (out_dir / "report.json").exists() or args.fresh:
        limit = ["--limit", str(settings.test_limit)] if settings.test_limit else []
        rlvr("eval", "--model", str(model), "--task", settings.task, "--task-config", json.dumps(settings.task_config), "--split", "test",
             "--max-new-tokens", str(settings.max_new_tokens), "--out", str(out_dir), "--threads", str(args.threads), *limit,
             *prompt_flags(settings), threads=args.threads, log=log)
    return out_dir


def run_overrides(preset: str, seed: int, base: Path, pairs: Path | None, out: Path, settings: Settings, args: argparse.Namespace) -> list[str]:
    budget = [Budget(**settings.budget).override, "optim.schedule=constant"] if settings.budget else []
    limit = [f"eval.limit={settings.eval_limit}"] if settings.eval_limit else []
    return [
        f"output_dir={out}", f"name={preset}-s{seed}", "overwrite=true", f"model.name_or_path={base}", *settings.task_overrides,
        f"algo.preset={preset}", f"seed={seed}", f"threads={args.threads}", f"update.steps={settings.max_steps}",
        f"rollout.prompts_per_step={settings.prompts}", f"rollout.max_new_tokens={settings.max_new_tokens}", *budget,
        f"eval.every={settings.eval_every}", "eval.at_start=true", "eval.split=validation", *limit, "log.checkpoint_every=0",
        "log.tensorboard=false", "log.progress=false", *([f"pairs.path={pairs}"] if pairs is not None and preset == "dpo" else []),
        *settings.overrides,
    ]


def train_and_test(preset: str, seed: int, base: Path, pairs: Path | None, out: Path, settings: Settings, args: argparse.Namespace) -> Path:
    """Train ``preset`` with ``seed`` and evaluate its final model on the test split."""
    run_dir = out / f"{preset}-s{seed}"
    if (run_dir / "test_eval" / "report.json").exists() and not args.fresh:
        return run_dir
    t = time.perf_counter()
    rlvr("train", settings.config, *run_overrides(preset, seed, base, pairs, out, settings, args), threads=args.threads,
         log=out / f"{run_dir.name}.log")
    test_eval(run_dir / "final", run_dir / "test_eval", out / f"{run_dir.name}.eval.log", settings, args)
    print(f"{preset} seed {seed}: {time.perf_counter() - t:.0f} s", flush=True)
    return run_dir


def read_run(run_dir: Path, sampled_before: int) -> dict:
    """What one run spent, how it ended, its validation curve and its resources; ``sampled_before``
    completions were generated before training (offline DPO's pairs) and count as spent."""
    from rlvr.plots import read_metrics

    curve, last = [], {}
    for r in read_metrics(run_dir / "metrics.jsonl"):
        if "spent/completions" in r:
            last = r
        if "eval/accuracy" in r:
            curve.append({"step": r["step"], "completions": r.get("spent/completions", 0.0) + sampled_before,
                          "optimizer_steps": r.get("spent/optimizer_steps", 0.0), "seconds": r.get("spent/seconds", 0.0),
                          "accuracy": r["eval/accuracy"]})
    state = json.loads((run_dir / "run_state.json").read_text())
    resources = json.loads((run_dir / "resources.json").read_text())
    return {"curve": curve, "steps": state["step"], "stopped_by": state.get("stopped_by"),
            "completions": last.get("spent/completions", 0.0) + sampled_before, "optimizer_steps": last.get("spent/optimizer_steps", 0.0),
            "seconds": last.get("spent/seconds", 0.0), "peak_rss_mb": resources["peak_rss_bytes"] / 2**20,
            "models_in_memory": resources["models_in_memory"]}


def summarise(presets: list[str], runs: dict[str, list[dict]], run_dirs: dict[str, list[Path]], base_eval: Path,
              reference: str) -> list[dict]:
    """Per preset: the `rlvr compare --arm` numbers (test accuracy over seeds; differences to the
    reference preset and to the starting model) and the means of what its runs spent."""
    from rlvr.eval.compare import Arm, GreedyResult, compare_arms

    arms = [Arm(p, tuple(GreedyResult.load(d / "test_eval", f"{p}[{i}]") for i, d in enumerate(run_dirs[p]))) for p in presets]
    seeds = len(arms[0].runs)
    base = Arm("base", (GreedyResult.load(base_eval, "base"),) * seeds)
    _, summaries, vs_ref = compare_arms(arms, reference if reference in presets else presets[0])
    _, _, vs_base = compare_arms([base, *arms], "base")
    by = {s.label: s for s in summaries}
    diff_ref = {d.arm: d for d in vs_ref}
    diff_base = {d.arm: d for d in vs_base}
    out = []
    for p in presets:
        s, rs = by[p], runs[p]
        row = {"preset": p, "seeds": s.seeds, "test_accuracy": s.mean, "ci95": [s.lo, s.hi], "per_seed": list(s.accuracies),
               "gain": asdict(diff_base[p]), "completions": statistics.fmean(r["completions"] for r in rs),
               "optimizer_steps": statistics.fmean(r["optimizer_steps"] for r in rs), "seconds": statistics.fmean(r["seconds"] for r in rs),
               "steps": statistics.fmean(r["steps"] for r in rs), "budget_reached": sum(r["stopped_by"] is not None for r in rs),
               "models_in_memory": rs[0]["models_in_memory"], "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
               "curves": [r["curve"] for r in rs]}
        if p in diff_ref:
            row["vs_reference"] = asdict(diff_ref[p])
        out.append(row)
    return out


def _interval(d: dict) -> str:
    return f"{100 * d['diff']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"


def write_table(results: list[dict], out: Path, settings: Settings, args: argparse.Namespace, base_accuracy: float) -> str:
    budget = f"a budget of {Budget(**settings.budget).describe()} per run (at most {settings.max_steps} steps)" if settings.budget \
        else f"{settings.max_steps} steps per run"
    reference = results[0]["vs_reference"]["reference"] if "vs_reference" in results[0] else results[0]["preset"]
    lines = [
        f"{settings.task} {json.dumps(settings.task_config)}, config {settings.config}, from a starting model at {base_accuracy:.3f} greedy "
        f"test accuracy; {budget}, {settings.prompts} prompts x {settings.group_size} completions a step, seeds {','.join(map(str, args.seeds))}, "
        f"{args.jobs} run(s) at a time with {args.threads} thread(s) each. Test accuracy: greedy, mean over seeds with its 95% t-interval "
        f"across seeds; Δ: paired by problem within a seed, mean over seeds, 95% two-level bootstrap (seeds, then problems). "
        f"Spent: mean over seeds; budget reached: runs that stopped at the budget rather than at the step bound.",
        "",
        f"| preset | test accuracy | Δ vs start (pts) | Δ vs {reference} (pts) | completions | optimizer steps | train s | steps "
        "| budget reached | models in memory | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lo, hi = r["ci95"]
        acc = f"{r['test_accuracy']:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{r['test_accuracy']:.3f}"
        diff = _interval(r["vs_reference"]) + ("" if r["vs_reference"]["lo"] > 0 or r["vs_reference"]["hi"] < 0 else " (includes 0)") \
            if "vs_reference" in r else "—"
        reached = f"{r['budget_reached']}/{r['seeds']}" if settings.budget else "—"
        lines.append(f"| {r['preset']} | {acc} | {_interval(r['gain'])} | {diff} | {r['completions']:.0f} | {r['optimizer_steps']:.0f} "
                     f"| {r['seconds']:.0f} | {r['steps']:.0f} | {reached} | {r['models_in_memory']} | {r['peak_rss_mb']:.0f} |")
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"settings": asdict(settings), "base_accuracy": base_accuracy, "presets": results}, indent=2))
    return table


def plot(results: list[dict], png: Path, base_accuracy: float, title: str) -> None:
    """Test accuracy per preset (mean over seeds, 95% t-interval, the starting model as a line), and
    validation accuracy during training (mean over seeds) against completions, optimizer steps and seconds spent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(22, 5.2), gridspec_kw={"width_ratios": [1.1, 1, 1, 1]})
    colors = plt.cm.tab20.colors
    order = sorted(results, key=lambda r: r["test_accuracy"])
    ax = axes[0]
    for y, r in enumerate(order):
        lo, hi = r["ci95"]
        err = [[r["test_accuracy"] - lo], [hi - r["test_accuracy"]]] if lo is not None else None
        ax.errorbar(r["test_accuracy"], y, xerr=err, fmt="o", color=colors[results.index(r) % 20], capsize=3)
    ax.axvline(base_accuracy, color="grey", ls=":", label=f"start {base_accuracy:.3f}")
    ax.set_yticks(range(len(order)), [r["preset"] for r in order])
    ax.set_xlabel("test accuracy after training (greedy; mean over seeds, 95% CI)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    for i, r in enumerate(results):
        n = min(len(c) for c in r["curves"])
        mean = [statistics.fmean(c[k]["accuracy"] for c in r["curves"]) for k in range(n)]
        for ax, key in zip(axes[1:], ("completions", "optimizer_steps", "seconds")):
            xs = [statistics.fmean(c[k][key] for c in r["curves"]) for k in range(n)]
            ax.plot(xs, mean, marker="o", ms=3, label=r["preset"], color=colors[i % 20], ls="-" if i < 10 else "--")
    for ax, label in zip(axes[1:], ("completions generated", "optimizer steps", "seconds of training steps")):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[1].set_ylabel("validation accuracy during training (greedy; mean over seeds)")
    axes[3].legend(fontsize=7, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def resolve_settings(args: argparse.Namespace) -> Settings:
    """The comparison's settings from the config (with --task, --task-config and --override over it), checked before anything runs."""
    import tasks
    from rlvr.config import read_config
    from rlvr.train.recipes import load_run_config

    raw, _ = read_config(args.config)
    task = args.task or (raw.get("task") or {}).get("id") or "arithmetic-v1"
    if args.task_config is not None:
        task_config = yaml.safe_load(args.task_config) or {}
    else:  # the config's own task config belongs to its task
        task_config = (raw.get("task") or {}).get("config") or {} if task == (raw.get("task") or {}).get("id") else {}
    if not isinstance(task_config, dict):
        raise SystemExit(f"--task-config must be a mapping, got {args.task_config!r}")
    cfg = load_run_config(args.config, [f"task.id={task}", f"task.config={json.dumps(task_config)}", *args.override])
    splits = tasks.make(task, **task_config).splits
    missing = [s for s in ("validation", "test") if s not in splits]
    if missing:
        raise SystemExit(f"task {task} has no {' or '.join(missing)} split (its splits: {', '.join(splits)}): the comparison "
                         "evaluates on validation during training and on test at the end")
    prompts = args.prompts or cfg.rollout.prompts_per_step
    group, budget = cfg.rollout.group_size, args.budget
    if args.max_steps:
        max_steps = args.max_steps
    elif budget is None:
        max_steps = cfg.update.steps
    elif budget.kind == "completions":
        max_steps = math.ceil(budget.amount / (prompts * group))  # every step generates at least prompts x group completions
    elif budget.kind == "steps":
        max_steps = 2 * int(budget.amount)  # room for steps skipped for lack of signal
    else:
        max_steps = cfg.update.steps
    return Settings(
        config=args.config, task=task, task_config=task_config, model=args.model, prompts=prompts, group_size=group,
        max_new_tokens=args.max_new_tokens or cfg.rollout.max_new_tokens, prompt=asdict(cfg.prompt),
        budget=asdict(budget) if budget else None, max_steps=max_steps, eval_every=args.eval_every, eval_limit=args.eval_limit,
        test_limit=args.test_limit, overrides=list(args.override))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: ``seeds`` and ``presets`` as lists, ``budget`` as a `Budget` (or None)."""
    from rlvr.algos.config import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="quickstart", help="the RL config every run starts from: a built-in name or a YAML file (default quickstart)")
    ap.add_argument("--task", default=None, help="task id (default: the config's task.id)")
    ap.add_argument("--task-config", default=None, help="task config as YAML/JSON (default: the config's task.config when --task is its task, else {})")
    ap.add_argument("--model", default=None, help="the starting model of every run (default: build it with the built-in SFT config for the task)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated presets (default: all)")
    ap.add_argument("--reference", default="grpo", help="the preset every other is compared with (default grpo, else the first)")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds (default 0,1,2)")
    ap.add_argument("--budget", default=None, help="what every run may spend: completions=N, steps=N (optimizer steps) or seconds=N "
                    "(default: none, every run trains --max-steps steps)")
    ap.add_argument("--max-steps", type=int, default=None, help="most training steps of a run (update.steps; default: see the module docstring)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (rollout.prompts_per_step; default: the config's)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="longest completion in training and evaluation (default: the config's)")
    ap.add_argument("--eval-every", type=int, default=5, help="validation every this many steps (default 5)")
    ap.add_argument("--eval-limit", type=int, default=None, help="validation problems per evaluation during training (default: all)")
    ap.add_argument("--test-limit", type=int, default=None, help="test problems in the final evaluation (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (each with --threads threads); seconds are comparable only within one setting")
    ap.add_argument("--output-dir", default="runs/compare_algos")
    ap.add_argument("--fresh", action="store_true", help="rerun runs that already have results")
    ap.add_argument("--override", action="append", default=[], help="extra key=value for every run (repeatable)")
    ap.add_argument("--sft-override", action="append", default=[], help="extra key=value for the SFT run that builds the starting model (repeatable)")
    args = ap.parse_args(argv)
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        args.budget = Budget.parse(args.budget) if args.budget else None
    except ValueError as e:
        ap.error(str(e))
    args.presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    unknown = [p for p in args.presets if p not in PRESETS]
    if unknown:
        ap.error(f"unknown preset(s) {', '.join(unknown)}; presets: {', '.join(PRESETS)}")
    if not args.seeds or not args.presets:
        ap.error("give at least one preset and one seed")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    presets = args.presets
    settings = resolve_settings(args)

    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    recorded = out / "settings.json"
    if recorded.exists() and not args.fresh and json.loads(recorded.read_text()) != json.loads(json.dumps(asdict(settings))):
        raise SystemExit(f"{out} holds runs of other settings ({recorded}); rerun them with --fresh, or choose another --output-dir")
    recorded.write_text(json.dumps(asdict(settings), indent=2))

    base = Path(args.model) if args.model else build_base(out, settings, args)
    pairs, sampled = build_pairs(base, out, settings, args) if "dpo" in presets else (None, 0)
    jobs = [(preset, seed) for seed in args.seeds for preset in presets]  # seed-major: an early look covers every preset
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:  # each run is its own process
        done = dict(zip(jobs, pool.map(lambda job: train_and_test(job[0], job[1], base, pairs, out, settings, args), jobs)))
    run_dirs = {p: [done[p, s] for s in args.seeds] for p in presets}
    runs = {p: [read_run(d, sampled if p == "dpo" else 0) for d in run_dirs[p]] for p in presets}
    base_eval = test_eval(base, out / "base_test_eval", out / "base.eval.log", settings, args)
    base_accuracy = json.loads((base_eval / "report.json").read_text())["greedy"]["accuracy"]
    results = summarise(presets, runs, run_dirs, base_eval, args.reference)
    print()
    print(write_table(results, out, settings, args, base_accuracy))
    title = f"{settings.task}: every preset from the same starting model, " + (Budget(**settings.budget).describe() if settings.budget
                                                                               else f"{settings.max_steps} steps") + " each"
    plot(results, out / "compare_algos.png", base_accuracy, title)
    arms = " ".join(f"--arm {p}=" + ",".join(str(d / "test_eval") for d in run_dirs[p]) for p in presets)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'} and {out / 'compare_algos.png'}; the same comparison of the test "
          f"evaluations: rlvr compare {arms}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
