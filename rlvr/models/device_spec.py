"""The spelling of a ``device`` setting (auto, cpu, cuda, cuda:N), checked without torch so that a
misspelt device is refused before torch loads; `rlvr.models.device.resolve_device` decides whether
the machine can honour it."""

from __future__ import annotations

import re

from rlvr import UserError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_SPELLING = re.compile(r"auto|cpu|cuda(?::(\d+))?")


def parse_device_spec(spec: str, what: str = "device") -> re.Match:
    """The match of ``spec`` (lower-cased; group 1 is N of cuda:N); `UserError` naming ``what`` when
    it is none of `DEVICE_CHOICES`."""
    match = _SPELLING.fullmatch(str(spec).strip().lower())
    if match is None:
        raise UserError(f"{what}={spec!r}: must be {DEVICE_CHOICES}")
    return match
