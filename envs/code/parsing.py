"""Python's parser for rlvr's in-process uses (test cases, test programs, dataset rows), one thread at a time.

CPython 3.11 and 3.12 count the depth of the AST objects they build in one counter for the whole interpreter, not
one a thread. When two threads parse at once (the trainer building a task's test cases while verifier threads parse
programs) and a garbage collection switches between them mid-parse, the counter is left wrong and ``ast.parse``
fails with ``SystemError: AST constructor recursion depth mismatch`` (CPython gh-106905 and its follow-ups): a
training run on code died of it. The lock keeps a parse whole.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_PARSING = threading.RLock()  # (reentrant: a finalizer run by a collection mid-parse may parse too)


def parse(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse`, not beside another thread's parse."""
    with _PARSING:
        return ast.parse(source, mode=mode)


def literal_eval(source: str | ast.AST) -> Any:
    """`ast.literal_eval`, not beside another thread's parse (a node is not parsed again)."""
    if isinstance(source, ast.AST):
        return ast.literal_eval(source)
    with _PARSING:
        return ast.literal_eval(source)
