"""Failed verifications over a run: counted per step, warned about, summarised at the end."""

from __future__ import annotations

from dataclasses import dataclass

from envs.types import Status, Verdict


@dataclass
class VerificationTally:
    """Failed verifications (status error or timeout) over a run, summed over processes.

    A run whose every verdict failed learned nothing from its rewards: it ends with a non-zero
    exit even when every step ran (`rlvr.train.harness.Harness.run`)."""

    verdicts: int = 0
    errors: int = 0
    timeouts: int = 0
    first_reason: str = ""

    @property
    def failed(self) -> int:
        return self.errors + self.timeouts

    @property
    def all_failed(self) -> bool:
        return self.verdicts > 0 and self.failed == self.verdicts

    def summary(self) -> str:
        return (f"{self.failed} of {self.verdicts} verifications failed over the run ({self.errors} errors, {self.timeouts} timeouts; "
                f"first: {self.first_reason})")


def first_failure_reason(verdicts: list[Verdict]) -> str:
    """The first error message (or timeout) among ``verdicts``, cut to one short line."""
    for v in verdicts:
        if v.status is Status.ERROR:
            return " ".join(str(v.info.get("error") or "error").split())[:300]
        if v.status is Status.TIMEOUT:
            return f"timeout ({v.info.get('error') or 'over verify.timeout_s'})"[:300]
    return ""


__all__ = ["VerificationTally", "first_failure_reason"]
