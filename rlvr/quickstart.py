"""The embedded default end to end: build and warm up a tiny model, evaluate it on the frozen
held-out split, train it with GRPO, evaluate again, and summarise.

Everything runs through the same public pieces a user would call (`sft`, `train`, `evaluate`);
this module only sequences them and times each phase.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import tasks
from rlvr.config import load_config
from rlvr.eval.runner import EvalSettings, evaluate, write_report
from rlvr.rollout.config import RolloutConfig
from rlvr.rollout.engines import make_engine
from rlvr.train.config import TrainConfig
from rlvr.train.recipes import train
from rlvr.train.sft import SFTConfig, sft

SFT_CONFIG, RL_CONFIG = "sft_quickstart", "quickstart"
"""The two stages' configs (``rlvr/configs/``): the warm-up, then GRPO from its model."""


def heldout(model_dir: Path, task: tasks.Task, out: Path, max_new_tokens: int) -> dict[str, Any]:
    """Greedy accuracy on the frozen test split (the quickstart's before/after figure); the report is
    also written to ``out``. Greedy decoding on one engine: the same model gives the same figure."""
    settings = EvalSettings(split="test", greedy=True, n=0, max_new_tokens=max_new_tokens, chunk_prompts=256)
    report = evaluate(make_engine(RolloutConfig(), model_path=model_dir), task, settings, model_name=str(model_dir))
    write_report(report, out, task.problems("test"))
    return report


def heldout_settings(sft_cfg: SFTConfig) -> tuple[tasks.Task, int]:
    """The task and token budget the held-out evaluations use: the warm-up's own."""
    return tasks.make(sft_cfg.task.id, **sft_cfg.task.config), sft_cfg.eval.max_new_tokens or 128


def rl_stage(base: Path, output_dir: str, overrides: list[str] | None = None):
    """The GRPO stage (`RL_CONFIG`) from ``base``; returns the run's `train` result."""
    rl_cfg = load_config(TrainConfig, RL_CONFIG, [f"output_dir={output_dir}", f"model.name_or_path={base}", "overwrite=true", *(overrides or [])])
    result = train(rl_cfg)
    if result.final_model is None:
        raise RuntimeError(f"RL stage ended with status {result.status!r}; see {result.run_dir}")
    return result


def run_quickstart(output_dir: str = "runs", sft_overrides: list[str] | None = None, rl_overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the pipeline; returns the summary also written to ``output_dir/quickstart/summary.json``."""
    root = Path(output_dir) / "quickstart"
    # the pipeline starts afresh each time it is run (its two run directories are overwritten)
    sft_cfg = load_config(SFTConfig, SFT_CONFIG, [f"output_dir={output_dir}", "overwrite=true", *(sft_overrides or [])])
    phases: dict[str, float] = {}
    t_all = time.perf_counter()

    t = time.perf_counter()
    base = sft(sft_cfg)
    phases["sft_s"] = time.perf_counter() - t

    task, max_new = heldout_settings(sft_cfg)
    t = time.perf_counter()
    before = heldout(base, task, root / "eval_before", max_new)
    phases["eval_before_s"] = time.perf_counter() - t

    t = time.perf_counter()
    result = rl_stage(base, output_dir, rl_overrides)
    phases["rl_s"] = time.perf_counter() - t

    t = time.perf_counter()
    after = heldout(result.final_model, task, root / "eval_after", max_new)
    phases["eval_after_s"] = time.perf_counter() - t
    phases["total_s"] = time.perf_counter() - t_all

    summary = {
        "task": task.describe(),
        "heldout_split": "test",
        "heldout_problems": before["problems"],
        "data_checksum": before["data_checksum"],
        "heldout_before": before["greedy"]["accuracy"],
        "heldout_before_ci95": before["greedy"]["ci95"],
        "heldout_after": after["greedy"]["accuracy"],
        "heldout_after_ci95": after["greedy"]["ci95"],
        "gain_points": 100 * (after["greedy"]["accuracy"] - before["greedy"]["accuracy"]),
        "mean_completion_chars_before": mean_completion_chars(before),
        "mean_completion_chars_after": mean_completion_chars(after),
        "wall_time": phases,
        "sft_model": str(base),
        "rl_model": str(result.final_model),
        "rl_run": str(result.run_dir),
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def mean_completion_chars(report: dict[str, Any]) -> float:
    """Mean characters of the greedy completions: a finer fingerprint than the accuracy."""
    samples = report["_greedy_samples"].completions
    return sum(len(row[0].text) for row in samples) / max(len(samples), 1)
