"""When a process of a multi-process run dies (its node crashed, it was killed), the others fail in
their next collective with a transport error that names an address, not a process. This module
recognises that error (`is_lost_process`) and finds which processes are gone (`roll_call`): every
survivor writes its rank into the run directory (which every node sees: checkpoints need it too)
and waits a bounded time for the others; the ranks that never answered are the lost ones.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import torch

ROLL_CALL_S = 10.0
"""How long a survivor waits for the others to answer the roll call: they meet the broken
collective within the same step, so seconds apart at most."""

_GLOO_TRANSPORT = "/".join(("gloo", "transport"))  # a source path in every gloo transport error; NCCL's are DistErrors


def is_lost_process(error: BaseException) -> bool:
    """Whether ``error`` (or what it was raised from) is a collective that failed because a peer
    process went away: a torch.distributed error, or gloo's transport error (a plain RuntimeError)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, torch.distributed.DistError) or (isinstance(e, RuntimeError) and _GLOO_TRANSPORT in str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def roll_call(folder: Path, rank: int, world: int, wait_s: float = ROLL_CALL_S) -> list[int]:
    """Answer in ``folder`` as ``rank`` (host and pid) and wait up to ``wait_s`` for the other
    ranks of ``world``; returns the ranks that did not answer, sorted."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank-{rank}").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    deadline = time.monotonic() + wait_s
    while True:
        missing = [r for r in range(world) if not (folder / f"rank-{r}").exists()]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.2)


def first_line(error: BaseException, limit: int = 160) -> str:
    """The first sentence of ``error``'s message (gloo's go on with generic advice), cut at ``limit`` characters."""
    text = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0]
    return text if len(text) <= limit else text[:limit] + "..."


__all__ = ["ROLL_CALL_S", "first_line", "is_lost_process", "roll_call"]
