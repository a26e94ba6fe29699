"""What a batch of multi-turn episodes did: tool use, tool failures, turns, observation tokens.

One function for training logs (per step) and evaluation reports, so both count the same way.
"""

from __future__ import annotations

from typing import Sequence

from envs.episode import End
from envs.types import Verdict
from rlvr.rollout.base import Completion


def episode_metrics(completions: Sequence[Completion], verdicts: Sequence[Verdict] | None = None, prefix: str = "episode/") -> dict[str, float]:
    """Means over the episodes among ``completions`` (single-turn completions are skipped; no
    episodes gives ``{}``).

    Keys (after ``prefix``): ``episodes``; ``turns`` (model turns per episode);
    ``tool_calls`` (per episode); ``tool_use_rate`` (share of episodes with a call);
    ``tool_error_rate`` / ``tool_timeout_rate`` (per call: a failed call that is not a timeout,
    and a timeout); ``tool_s_per_call`` and ``tool_s`` (seconds the programs ran in the sandbox,
    per call and in all); ``tool_latency_s_per_call`` (from call to result, waiting for a
    sandbox worker included);
    ``observation_tokens`` and ``model_tokens`` (per episode); ``observation_token_frac``;
    ``step_failures`` (episodes whose step function raised or hung); ``end/<reason>`` (share of
    episodes per `envs.episode.End`). With ``verdicts`` (aligned with ``completions``) also
    ``accuracy_with_tool`` / ``accuracy_without_tool`` and ``tool_output_correct_rate`` (share of
    episodes where a call printed the gold answer, for environments that report it).
    """
    rows = [(c, verdicts[i] if verdicts is not None else None) for i, c in enumerate(completions) if c.episode is not None]
    if not rows:
        return {}
    n = len(rows)
    episodes = [c.episode for c, _ in rows]
    calls = [call for e in episodes for call in e.calls]
    obs_tokens = [sum(1 - m for m in (c.loss_mask or [])) for c, _ in rows]
    all_tokens = sum(len(c.token_ids) for c, _ in rows)
    out = {
        "episodes": float(n),
        "turns": sum(len(e.model_turns) for e in episodes) / n,
        "tool_calls": len(calls) / n,
        "tool_use_rate": sum(bool(e.calls) for e in episodes) / n,
        "tool_error_rate": sum(c.failed and c.status != "timeout" for c in calls) / max(len(calls), 1),
        "tool_timeout_rate": sum(c.status == "timeout" for c in calls) / max(len(calls), 1),
        "tool_s_per_call": sum(c.wall_s for c in calls) / max(len(calls), 1),
        "tool_latency_s_per_call": sum(c.latency_s for c in calls) / max(len(calls), 1),
        "tool_s": sum(c.wall_s for c in calls),
        "observation_tokens": sum(obs_tokens) / n,
        "model_tokens": (all_tokens - sum(obs_tokens)) / n,
        "observation_token_frac": sum(obs_tokens) / max(all_tokens, 1),
        "step_failures": float(sum(e.end in (End.STEP_ERROR, End.STEP_TIMEOUT) for e in episodes)),
        **{f"end/{end.value}": sum(e.end is end for e in episodes) / n for end in End},
    }
    if verdicts is not None:
        with_tool = [v.passed for (c, v), e in zip(rows, episodes) if e.calls]
        without = [v.passed for (c, v), e in zip(rows, episodes) if not e.calls]
        out["accuracy_with_tool"] = sum(with_tool) / max(len(with_tool), 1)
        out["accuracy_without_tool"] = sum(without) / max(len(without), 1)
        reported = [v.info.get("episode", {}).get("tool_output_correct") for v in (v for _, v in rows)]
        if any(r is not None for r in reported):
            out["tool_output_correct_rate"] = sum(bool(r) for r in reported) / n
    return {prefix + k: v for k, v in out.items()}
