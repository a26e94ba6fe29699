"""Training curves as a PNG: one small panel per metric, against the step."""

from __future__ import annotations

import json
import math
from pathlib import Path

# Panels in this order when present; anything else numeric is left to TensorBoard.
DEFAULT_PANELS = [
    ("reward/mean", "reward"), ("reward/accuracy", "accuracy"), ("eval/accuracy", "held-out accuracy"),
    ("policy/kl", "KL to reference"), ("policy/entropy", "entropy"), ("rollout/response_len", "response length"),
    ("policy/clip_frac_high", "clip fraction (high)"), ("policy/clip_frac_low", "clip fraction (low)"),
    ("groups/zero_variance_frac", "zero-variance groups"), ("sampling/yield", "dynamic-sampling yield"),
    ("sft/loss", "SFT loss"), ("loss/total", "loss"),
]


def read_metrics(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut off by a killed run
    return rows


def plot_metrics(metrics_path: Path, out_png: Path, title: str = "") -> Path | None:
    """Plot the standard panels found in ``metrics.jsonl``; returns the PNG path (None if no data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    panels = [(k, label) for k, label in DEFAULT_PANELS if any(k in r for r in rows)]
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 2.8 * nrows), squeeze=False)
    for ax, (key, label) in zip(axes.flat, panels):
        pts = [(r["step"], r[key]) for r in rows if key in r and r[key] is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 30 else None, ms=3)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return out_png
