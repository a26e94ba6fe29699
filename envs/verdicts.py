"""Validation of what a verifier returns, at the boundary every verification path goes through.

A verifier is user code. A reward of NaN or infinity (or beyond float32's range), a ``passed`` that is not a bool, or a status
that is not a `Status` would otherwise travel into group statistics and tensors and fail far from
its cause (or, for NaN, compare unequal to itself). `validate_verdict` turns such a value into an
``error`` verdict whose ``info`` says what was wrong, so it is counted like any verifier failure.
Well-formed verdicts of other numeric types (``numpy.float32`` rewards, ``numpy.bool_``) are
converted to plain ``float`` / ``bool``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from envs.types import Status, StepReward, Verdict


FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32: rewards become float32 tensors


class InvalidVerdict(ValueError):
    """A verifier returned a value that is not a well-formed `Verdict`."""


def _reward(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidVerdict(f"{what} must be a real number, got {type(value).__name__} {value!r:.40}")
    number = float(value)
    if not math.isfinite(number):
        raise InvalidVerdict(f"{what} must be finite, got {number}")
    if abs(number) > FLOAT32_MAX:  # it would become inf in the trainer's float32 tensors and train nothing
        raise InvalidVerdict(f"{what} must be finite in float32 (|reward| <= {FLOAT32_MAX:.4g}), got {number:g}")
    return number


def _flag(value: Any) -> bool:
    # numpy's bool is not a bool subclass; accept it by name rather than importing numpy here
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    raise InvalidVerdict(f"passed must be a bool, got {type(value).__name__} {value!r:.40}")


def _status(value: Any) -> Status:
    if isinstance(value, Status):
        return value
    try:
        return Status(value)
    except ValueError:
        raise InvalidVerdict(f"status must be one of {', '.join(s.value for s in Status)}, got {value!r:.40}") from None


def _step(i: int, step: Any) -> StepReward:
    if not isinstance(step, StepReward):
        raise InvalidVerdict(f"steps[{i}] must be a StepReward, got {type(step).__name__}")
    if not (isinstance(step.start, int) and isinstance(step.end, int) and 0 <= step.start <= step.end):
        raise InvalidVerdict(f"steps[{i}] has an invalid span {step.start!r}..{step.end!r}")
    reward = _reward(step.reward, f"steps[{i}].reward")
    return step if reward == step.reward and type(step.reward) is float else dataclasses.replace(step, reward=reward)


def normalise_verdict(verdict: Any) -> Verdict:
    """``verdict`` with plain ``float``/``bool``/`Status` fields; raises `InvalidVerdict` naming
    the first field that is not well formed."""
    if not isinstance(verdict, Verdict):
        raise InvalidVerdict(f"verify must return a Verdict, got {type(verdict).__name__} {verdict!r:.40}")
    reward = _reward(verdict.reward, "reward")
    passed = _flag(verdict.passed)
    status = _status(verdict.status)
    if passed and status.is_failure:
        raise InvalidVerdict(f"a verdict with status {status.value!r} cannot pass")
    steps = tuple(_step(i, s) for i, s in enumerate(verdict.steps or ()))
    if verdict.extracted is not None and not isinstance(verdict.extracted, str):
        raise InvalidVerdict(f"extracted must be a str or None, got {type(verdict.extracted).__name__}")
    if not isinstance(verdict.info, dict):
        raise InvalidVerdict(f"info must be a dict, got {type(verdict.info).__name__}")
    if (reward, passed, status, steps) == (verdict.reward, verdict.passed, verdict.status, verdict.steps) and type(verdict.reward) is float:
        return verdict
    return dataclasses.replace(verdict, reward=reward, passed=passed, status=status, steps=steps)


def validate_verdict(verdict: Any, source: str = "") -> Verdict:
    """``verdict`` normalised, or an ``error`` verdict that says why it was rejected (with the
    rejected value's repr in ``info['invalid_verdict']``)."""
    try:
        return normalise_verdict(verdict)
    except InvalidVerdict as e:
        where = f"{source}: " if source else ""
        return Verdict.error(f"{where}invalid verdict: {e}", invalid_verdict=repr(verdict)[:300])
