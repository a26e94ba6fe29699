"""Finding the code in a completion."""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)


@dataclass(frozen=True)
class ExtractedCode:
    """Code found in a completion and its character span there."""

    code: str
    start: int
    end: int


def extract_code(completion: str) -> ExtractedCode | None:
    """The last fenced code block (```python ... ```; an unclosed last fence runs to the end), or
    else the whole completion. None when there is no code at all (empty or whitespace)."""
    blocks = list(_FENCE.finditer(completion))
    if blocks:
        m = blocks[-1]
        code = m.group(1)
        if code.strip():
            return ExtractedCode(code, m.start(1), m.start(1) + len(code))
        return None
    if not completion.strip():
        return None
    return ExtractedCode(completion, 0, len(completion))
