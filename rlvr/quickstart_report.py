"""The quickstart's summary as printed, and as its record holds it (``records/quickstart.json``):
one mapping between the summary's keys and the record's figure names, used both ways. Imports
nothing heavy, so `scripts/record_quickstart.py` runs it with the system's ``python3``."""

from __future__ import annotations

from typing import Any

RECORD_KEYS = {"accuracy_before": "heldout_before", "accuracy_after": "heldout_after", "chars_before": "mean_completion_chars_before",
               "chars_after": "mean_completion_chars_after", "gain_points": "gain_points", "problems": "heldout_problems"}
PHASE_KEYS = {"sft_s": "sft_s", "rl_s": "rl_s", "eval_before_s": "eval_before_s", "eval_after_s": "eval_after_s", "pipeline_s": "total_s"}
"""The record's figure names (``records/quickstart.json``) for the summary's keys: one mapping both ways."""


def record_figures(s: dict[str, Any]) -> dict[str, float]:
    """The figures of ``records/quickstart.json`` from a summary (`scripts/record_quickstart.py`)."""
    figures = {fig: s[key] for fig, key in RECORD_KEYS.items()} | {fig: s["wall_time"][key] for fig, key in PHASE_KEYS.items()}
    for which in ("before", "after"):
        figures[f"{which}_ci_low"], figures[f"{which}_ci_high"] = s[f"heldout_{which}_ci95"]
    return figures


def summary_from_record(figures: dict[str, float]) -> dict[str, Any]:
    """The part of a summary that `format_summary` prints, from the record's figures (the page's
    example output is checked against it, `tests/test_records.py`)."""
    s: dict[str, Any] = {key: figures[fig] for fig, key in RECORD_KEYS.items()}
    s["heldout_problems"] = int(s["heldout_problems"])
    s["wall_time"] = {key: figures[fig] for fig, key in PHASE_KEYS.items()}
    for which in ("before", "after"):
        s[f"heldout_{which}_ci95"] = [figures[f"{which}_ci_low"], figures[f"{which}_ci_high"]]
    return s


def format_summary(s: dict[str, Any]) -> str:
    w = s["wall_time"]
    rows = [
        ("", "SFT base", "after GRPO"),
        (f"held-out greedy accuracy ({s['heldout_problems']} problems)", f"{s['heldout_before']:.3f}", f"{s['heldout_after']:.3f}"),
        ("95% CI", "{:.3f}-{:.3f}".format(*s["heldout_before_ci95"]), "{:.3f}-{:.3f}".format(*s["heldout_after_ci95"])),
        ("mean completion length (chars)", f"{s['mean_completion_chars_before']:.1f}", f"{s['mean_completion_chars_after']:.1f}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{a:<{width}}  {b:>12}  {c:>12}" for a, b, c in rows]
    lines.append(f"\ngain: {s['gain_points']:+.1f} points")
    lines.append(f"wall time: SFT {w['sft_s']:.0f} s, eval {w['eval_before_s']:.0f}+{w['eval_after_s']:.0f} s, GRPO {w['rl_s']:.0f} s, total {w['total_s']:.0f} s")
    return "\n".join(lines)
