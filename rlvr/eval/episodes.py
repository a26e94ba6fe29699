"""Multi-turn episodes in evaluation reports: tool use and tool failures beside the accuracy, and
the episodes turn by turn in ``predictions.jsonl``."""

from __future__ import annotations

from typing import Any

from rlvr.rollout.base import Completion
from rlvr.rollout.episode_metrics import episode_metrics
from rlvr.rollout.records import prediction_fields  # noqa: F401 - importable from here as before


def episode_section(completions: list[list[Completion]], verdicts: list[list[Any]]) -> dict[str, Any]:
    """``{"episodes": metrics}`` for a report section (empty for single-turn completions)."""
    flat = [c for row in completions for c in row]
    metrics = episode_metrics(flat, [v for row in verdicts for v in row], prefix="")
    return {"episodes": metrics} if metrics else {}


def markdown_rows(name: str, section: dict[str, Any]) -> list[str]:
    """Table rows for one report section's episode metrics."""
    e = section.get("episodes")
    if not e:
        return []
    rows = [
        (f"{name} tool use rate (episodes with a call)", f"{e['tool_use_rate']:.3f}"),
        (f"{name} tool calls / turns per episode", f"{e['tool_calls']:.2f} / {e['turns']:.2f}"),
        (f"{name} tool errors / timeouts per call", f"{e['tool_error_rate']:.3f} / {e['tool_timeout_rate']:.3f}"),
        (f"{name} time in the sandbox per call (latency with queueing), total", f"{1000 * e['tool_s_per_call']:.1f} ms "
                                                                               f"({1000 * e['tool_latency_s_per_call']:.1f} ms), {e['tool_s']:.1f} s"),
        (f"{name} accuracy with / without a tool call", f"{e['accuracy_with_tool']:.3f} / {e['accuracy_without_tool']:.3f}"),
    ]
    if "tool_output_correct_rate" in e:
        rows.append((f"{name} episodes whose tool printed the answer", f"{e['tool_output_correct_rate']:.3f}"))
    if e["step_failures"]:
        rows.append((f"{name} episodes whose step function failed", f"{e['step_failures']:.0f}"))
    return [f"| {k} | {v} | |" for k, v in rows]

