"""Training curves as a PNG: one small panel per metric, against the step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Panels in this order when present: (title, metric keys drawn together, y range or None).
# Anything else numeric is left to TensorBoard.
UNIT = (0.0, 1.0)
DEFAULT_PANELS: list[tuple[str, tuple[str, ...], tuple[float, float] | None]] = [
    ("training reward / accuracy", ("reward/mean", "reward/accuracy"), None),
    ("held-out accuracy (greedy)", ("eval/accuracy",), UNIT),
    ("KL to reference", ("policy/kl",), None),
    ("entropy", ("policy/entropy",), None),
    ("response length (tokens)", ("rollout/response_len",), None),
    ("clip fraction", ("policy/clip_frac_low", "policy/clip_frac_high"), None),
    ("zero-variance groups", ("groups/zero_variance_frac",), UNIT),
    ("dynamic-sampling yield", ("sampling/yield",), UNIT),
    ("implicit PRM accuracy (PRIME)", ("prm/accuracy",), UNIT),
    ("critic value loss (PPO)", ("critic/value_loss",), None),
    ("critic explained variance (PPO)", ("critic/explained_variance",), None),
    ("preference reward accuracy (DPO)", ("preference/reward_accuracy",), UNIT),
    ("implicit rewards beta log(pi/pi_ref)", ("preference/reward_chosen", "preference/reward_rejected",
                                               "preference/reward_desirable", "preference/reward_undesirable"), None),
    ("verifier errors / timeouts", ("verify/errors", "verify/timeouts"), None),
    ("SFT loss", ("sft/loss",), None),
    ("loss", ("loss/total",), None),
]


PANEL_IN = (4.2, 2.8)  # one panel's slot, inches (width, height)
MARGINS_IN = {"left": 0.6, "right": 0.15, "top": 0.35, "bottom": 0.45, "between_columns": 0.65, "between_rows": 0.75, "title": 0.3}
"""Fixed margins around and between the panels (room for tick labels, axis label and panel title), in inches.
matplotlib's tight_layout measures every label to find them and took ~40% of a plot's CPU time, at every checkpoint."""


def _place_panels(fig: Any, rows: int, cols: int, titled: bool) -> None:
    """Set the subplot parameters of a ``rows`` x ``cols`` grid of `PANEL_IN` slots from `MARGINS_IN`."""
    width, height = cols * PANEL_IN[0], rows * PANEL_IN[1]
    m = MARGINS_IN
    top = m["top"] + (m["title"] if titled else 0.0)
    axis_w = (width - m["left"] - m["right"] - (cols - 1) * m["between_columns"]) / cols
    axis_h = (height - top - m["bottom"] - (rows - 1) * m["between_rows"]) / rows
    fig.subplots_adjust(left=m["left"] / width, right=1 - m["right"] / width, top=1 - top / height, bottom=m["bottom"] / height,
                        wspace=m["between_columns"] / axis_w, hspace=m["between_rows"] / axis_h)


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
    fig = draw_metrics(read_metrics(metrics_path), title)
    if fig is None:
        return None
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    return out_png


def draw_metrics(rows: list[dict], title: str = "") -> Any:
    """The standard panels found in ``rows`` (metrics rows) as a matplotlib Figure, or None without data."""
    # a Figure of its own, not pyplot: no backend switched, so a notebook's inline plots still show afterwards
    from matplotlib.figure import Figure

    def series(key: str) -> list[tuple[float, float]]:
        return [(r["step"], r[key]) for r in rows if r.get(key) is not None]

    # a panel whose series are all zero (e.g. clip fractions of an on-policy run) says nothing
    panels = [(name, keys, yr) for name, keys, yr in DEFAULT_PANELS
              if any(v != 0 for k in keys for _, v in series(k))]
    if not panels:
        return None
    cols = min(3, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(PANEL_IN[0] * cols, PANEL_IN[1] * nrows))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax, (name, keys, yrange) in zip(axes.flat, panels):
        for key in keys:
            pts = series(key)
            if pts and len(set(v for _, v in pts)) > 0:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if len(pts) < 30 else None, ms=3,
                        label=key.split("/")[-1] if len(keys) > 1 else None)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        if yrange:
            ax.set_ylim(*yrange)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    _place_panels(fig, nrows, cols, titled=bool(title))
    return fig
