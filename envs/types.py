"""The typed values that cross package boundaries: `Problem`, `Verdict`, `StepReward`, `CutText`.

Everything here is plain data: frozen where it can be, picklable (environments run in worker
processes) and JSON-serialisable through `to_dict` (run directories and reports store them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, str]
"""A chat message, e.g. ``{"role": "user", "content": "..."}``."""


class Status(str, enum.Enum):
    """How a verification ended.

    Only ``OK`` and ``NO_ANSWER`` say something about the completion. ``ERROR`` and ``TIMEOUT``
    are failures of the verifier or its infrastructure: a trainer must not treat them as an
    ordinary wrong answer without saying so (it drops or zeroes them by config and counts them).
    """

    OK = "ok"
    NO_ANSWER = "no_answer"
    ERROR = "error"
    TIMEOUT = "timeout"

    @property
    def is_failure(self) -> bool:
        """True when the verdict carries no information about the completion."""
        return self in (Status.ERROR, Status.TIMEOUT)


@dataclass(frozen=True)
class Problem:
    """One item of a task.

    Attributes:
        id: Stable identifier, unique within its task and split (e.g. ``"test/17"``).
        prompt: The question as plain text, or as chat messages.
        reference: What the verifier compares against: a gold answer string, a list of tests, ...
            Must be picklable and JSON-serialisable.
        metadata: Anything else (a worked solution for supervised warm-up, difficulty, source).
    """

    id: str
    prompt: str | list[Message]
    reference: Any
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "prompt": self.prompt, "reference": self.reference, "metadata": self.metadata}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Problem:
        return cls(id=str(row["id"]), prompt=row["prompt"], reference=row["reference"], metadata=dict(row.get("metadata") or {}))


class CutText(str):
    """A completion's text that generation cut at its token budget (no end of turn was written).

    It is a ``str``, so every environment reads it as the text it is; one that judges a cut
    response differently asks ``isinstance(completion, CutText)`` (the math checker's lenient
    extraction then credits only an answer committed with a marker before the cut). Pickles as
    itself (process pools keep it); serialised as JSON it is plain text."""

    __slots__ = ()


@dataclass(frozen=True)
class StepReward:
    """A process reward for one span of the completion.

    Attributes:
        start: Offset of the first character of the step in the completion.
        end: Offset one past its last character.
        reward: The step's reward (typically 1.0 correct, 0.0 wrong).
        label: What the step is, for people (e.g. ``"347*8=2776"`` or ``"test 3"``).
    """

    start: int
    end: int
    reward: float
    label: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "reward": self.reward, "label": self.label}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> StepReward:
        return cls(start=row["start"], end=row["end"], reward=row["reward"], label=str(row.get("label", "")))


@dataclass(frozen=True)
class Verdict:
    """The result of verifying one completion.

    Attributes:
        reward: The scalar outcome reward (usually 1.0 or 0.0).
        passed: Whether the completion is correct.
        status: How verification ended; see `Status`.
        steps: Process rewards with character spans of the completion (may be empty).
        extracted: The answer the verifier extracted from the completion, if any.
        info: Free-form details for people (normalised forms, error messages, timings).
    """

    reward: float
    passed: bool
    status: Status = Status.OK
    steps: tuple[StepReward, ...] = ()
    extracted: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def error(cls, message: str, **info: Any) -> Verdict:
        return cls(reward=0.0, passed=False, status=Status.ERROR, info={"error": message, **info})

    @classmethod
    def timeout(cls, seconds: float, **info: Any) -> Verdict:
        return cls(reward=0.0, passed=False, status=Status.TIMEOUT, info={"timeout_s": seconds, **info})

    @classmethod
    def no_answer(cls, **info: Any) -> Verdict:
        return cls(reward=0.0, passed=False, status=Status.NO_ANSWER, info=dict(info))

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.reward,
            "passed": self.passed,
            "status": self.status.value,
            "steps": [s.to_dict() for s in self.steps],
            "extracted": self.extracted,
            "info": self.info,
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Verdict:
        """The inverse of `to_dict` (a verdict sent over the wire). Raises KeyError, TypeError or
        ValueError on a malformed row; callers validate the result (`envs.verdicts.validate_verdict`)."""
        if not isinstance(row, dict):
            raise TypeError(f"a verdict must be a JSON object, got {type(row).__name__}")
        info = row.get("info") or {}
        if not isinstance(info, dict):
            raise TypeError(f"verdict info must be an object, got {type(info).__name__}")
        extracted = row.get("extracted")
        return cls(reward=row["reward"], passed=row["passed"], status=Status(row.get("status", "ok")),
                   steps=tuple(StepReward.from_dict(s) for s in row.get("steps") or ()),
                   extracted=None if extracted is None else str(extracted), info=dict(info))
