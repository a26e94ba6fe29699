"""Whether the rollout servers answer (`rollout.engine=vllm_server`), asked before a run loads
anything: a server that is still starting (not listening yet) is waited for up to
``rollout.vllm.server_wait_s``, with one line naming it; one that is still not there then is refused
in one line naming its address, instead of after the model, optimizer and reference have loaded."""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Callable, Sequence

from rlvr import UserError

NOT_LISTENING_YET = (ConnectionRefusedError, ConnectionResetError, TimeoutError, socket.timeout)
"""Failures of a server that may still be starting: waited for. Anything else (an unknown host, a
malformed address) cannot get better by waiting and is refused at once."""


def require_servers(urls: Sequence[str], wait_s: float, say: Callable[[str], None] | None = None, timeout_s: float = 5.0) -> None:
    """Return once something answers ``GET url/health`` at every URL (any HTTP answer counts: the
    engine then checks the token and what the server says). A server not listening yet is asked
    again every second until ``wait_s`` has passed, after one line through ``say`` (default: stderr,
    on the first process only); then, or at once for a failure waiting cannot mend, `UserError`
    naming it."""
    say = say or _say_once_per_run
    deadline = time.monotonic() + wait_s
    for url in urls:
        said = False
        while (reason := _unanswered(url, timeout_s)) is not None:
            if not _may_be_starting(reason):
                raise UserError(f"rollout.engine=vllm_server: no rollout server answers at {url} ({reason}); {_HINT}") from None
            if time.monotonic() >= deadline:
                raise UserError(f"rollout.engine=vllm_server: no rollout server answers at {url} after waiting {wait_s:g} s "
                                f"(rollout.vllm.server_wait_s; {reason}); {_HINT}") from None
            if not said:
                say(f"waiting up to {wait_s:g} s (rollout.vllm.server_wait_s) for the rollout server at {url} to answer ({reason})")
                said = True
            time.sleep(1.0)


_HINT = ("start one with `rlvr rollout serve --model MODEL` first (--engine hf without vLLM), or set "
         "rollout.vllm.server_url (server_urls for several) to where they run")


def _unanswered(url: str, timeout_s: float) -> BaseException | None:
    """None when something answers ``GET url/health``, else why not."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # it answers; the engine reads what it says
    except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout, ValueError) as e:
        return getattr(e, "reason", e) if isinstance(e, urllib.error.URLError) else e


def _may_be_starting(reason: BaseException | str) -> bool:
    return isinstance(reason, NOT_LISTENING_YET)


def _say_once_per_run(line: str) -> None:
    if os.environ.get("RANK", "0") == "0":  # one line under torchrun
        print(line, file=sys.stderr, flush=True)


__all__ = ["require_servers"]
