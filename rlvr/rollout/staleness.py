"""Bounded staleness (``rollout.async.max_staleness = k``): which policy version samples which batch,
and the gate that keeps every trained sample within k versions of the policy it trains.

A **version** counts training steps: version v is the policy after step v (all of that step's
optimizer steps); version 0 is the starting weights. Step n trains batch n with the policy of
version n - 1, so a sample whose oldest token was sampled by version u is ``(n - 1) - u`` steps
stale when it is trained.

The **schedule** is a pure function of the batch number, so that a run, its rerun with the same seed
and its resume sample the same tokens: the generation worker produces batch n (its round n) with
version ``max(0, n - 1 - lag)``, waiting for that version when the trainer has not pushed it yet.

- Whole generations (``lag = k``): every sample of batch n is ``min(k, n - 1)`` steps stale; the
  worker runs up to k batches ahead of the trainer, and the queue absorbs up to k batches of jitter.
- Partial rollouts (``lag = 1``): a generation cut at ``rollout.async.partial_tokens`` continues in
  the next round with the next version, for at most ``k - lag + 1 = k`` rounds (the last unbounded),
  so its oldest token is at most ``lag + (k - 1) = k`` steps stale when it is trained.

`within_bound` is the one gate every sample passes before training (`rlvr.rollout.groups`): the
schedule never produces a sample beyond the bound, and the gate would drop one (counted).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

from rlvr.rollout.base import Completion
from rlvr.rollout.sampling import Group


def generation_lag(max_staleness: int, partial: bool) -> int:
    """How many batches the generation worker runs ahead of the trainer (see the module docstring)."""
    if max_staleness < 1:
        raise ValueError("an asynchronous schedule needs max_staleness >= 1")
    return 1 if partial else max_staleness


def round_version(round_: int, lag: int) -> int:
    """The policy version that samples round (batch) ``round_`` (1-based)."""
    return max(0, round_ - 1 - lag)


def max_segments(max_staleness: int, lag: int) -> int:
    """Rounds one generation may span (1: generations are never cut)."""
    return max_staleness - lag + 1


def segment_tokens(max_new_tokens: int, max_staleness: int, partial_tokens: int = 0) -> int:
    """Tokens a generation decodes per round before it is cut: ``partial_tokens``, or by default the
    budget split evenly over the k rounds a generation may span."""
    return partial_tokens or math.ceil(max_new_tokens / max_staleness)


def oldest_version(completion: Completion, default: int) -> int:
    """The version of a completion's oldest token (``default`` when it carries none, or is empty)."""
    return min(completion.versions) if completion.versions else default


def sample_staleness(completion: Completion, current: int) -> int:
    """Training steps between the policy ``current`` and the oldest one that sampled ``completion``."""
    return current - oldest_version(completion, current)


def within_bound(groups: Sequence[Group], current: int, max_staleness: int) -> tuple[list[Group], list[Group]]:
    """``(kept, dropped)``: a group is dropped when any of its samples is more than ``max_staleness``
    versions older than ``current`` (a group trains whole: its statistics need every member)."""
    kept, dropped = [], []
    for g in groups:
        worst = max((sample_staleness(c, current) for c in g.completions), default=0)
        (dropped if worst > max_staleness else kept).append(g)
    return kept, dropped


def histogram(values: Iterable[int]) -> dict[int, int]:
    """Counts by value, in order of value."""
    return dict(sorted(Counter(values).items()))


def staleness_metrics(groups: Sequence[Group], current: int) -> dict[str, float]:
    """The trained samples' staleness: ``async/staleness_hist/S`` (samples S steps stale), its mean
    and maximum, the mean over tokens (partial rollouts mix versions) and the share of samples whose
    tokens come from more than one version."""
    completions = [c for g in groups for c in g.completions]
    if not completions:
        return {}
    per_sample = [sample_staleness(c, current) for c in completions]
    tokens = [current - v for c in completions for v in (c.versions or [])]
    out = {f"async/staleness_hist/{s}": float(n) for s, n in histogram(per_sample).items()}
    out |= {"async/staleness_mean": sum(per_sample) / len(per_sample), "async/staleness_max": float(max(per_sample)),
            "async/token_staleness_mean": sum(tokens) / len(tokens) if tokens else 0.0,
            "async/mixed_version_frac": sum(len(set(c.versions or ())) > 1 for c in completions) / len(completions)}
    return out


__all__ = ["generation_lag", "histogram", "max_segments", "oldest_version", "round_version", "sample_staleness", "segment_tokens",
           "staleness_metrics", "within_bound"]
