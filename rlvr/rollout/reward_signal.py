"""What a training run is rewarded for: correctness (the verdict's own reward), or a control.

``verify.reward`` picks one. ``format`` is the format-only control: a completion earns 1 for a
well-formed answer whether it is right or not. Trained at the same budget as the real run, it
measures how much of a held-out gain is format alone (a single RL example can lift a benchmark
mostly by teaching the answer format); the real run's gain *beyond format* is its held-out
accuracy minus the control's. Only the training reward changes: ``passed`` stays the verifier's,
so training accuracy and every evaluation still measure correctness.
"""

from __future__ import annotations

from dataclasses import replace

from typing import Callable

from envs.registry import Registry, RegistryError
from envs.types import Status, Verdict
from rlvr import UserError

REWARD_SIGNALS: Registry = Registry("reward signal", versioned=False)


def reward_signal(name: str) -> Callable[[Verdict], Verdict]:
    """The signal registered as ``name``; an unknown one is a `UserError` naming ``verify.reward``."""
    try:
        return REWARD_SIGNALS.get(name)
    except RegistryError:
        raise UserError(f"verify.reward={name!r} is not a reward signal; choose one of: {', '.join(REWARD_SIGNALS.ids())}") from None


def well_formed(verdict: Verdict) -> bool:
    """An answer was found and read as one: not missing, not refused as a restatement or a
    non-numeric expression, not unparsable, and the verifier did not fail."""
    if verdict.status is not Status.OK or verdict.extracted is None:
        return False
    return not (verdict.info.get("rejected") or verdict.info.get("parse_error"))


@REWARD_SIGNALS.register("correctness")
def correctness(verdict: Verdict) -> Verdict:
    """The environment's reward, unchanged."""
    return verdict


@REWARD_SIGNALS.register("format")
def format_only(verdict: Verdict) -> Verdict:
    """1 for a well-formed answer, right or wrong; process rewards are dropped (they may carry
    correctness). Failed verifications keep their status, so ``verify.on_failure`` still applies."""
    if verdict.status.is_failure:
        return verdict
    return replace(verdict, reward=float(well_formed(verdict)), steps=())
