"""The candidate process of the tester path, as it runs in the sandbox: a fresh interpreter started
by the tester (`envs.code.tester_process`) that loads the solution and answers calls.

Standard library only, and light (it is started once per graded program): `envs.code.tester`
sends this source with the modules it needs (`envs.code.channel`, `envs.code.decoder`,
`envs.code.encoder`), passed to `serve_candidate` as arguments.

Its stdin and stdout are the channel's two pipes; it moves them to private descriptors and puts
``/dev/null`` on 0, 1 and 2 before loading the solution, so the solution's own prints and reads
never touch the channel. Nothing here is trusted: whatever this process sends is decoded as data
by the tester, and a test passes only if the tester's own code says so.
"""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any

CANDIDATE_MODULE = "__candidate__"  # the solution's __name__ (as in `envs.code.driver`): `if __name__ == "__main__"` blocks do not run


def _describe(e: BaseException) -> str:
    try:
        text = str(e)
        return f"{type(e).__name__}: {text}" if text else type(e).__name__
    except BaseException:  # a candidate's exception whose __str__ raises
        return "an exception that cannot be described"


def serve_candidate(channel: Any, decoder: Any, encode: Any) -> None:
    """Load the solution, then answer ``{"a": args, "k": kwargs}`` with ``{"v": value}`` or
    ``{"e": "Type: message"}`` until the tester closes the channel; never returns.
    Command-line arguments: the solution's file and the entry point's name."""
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    path, entry_point = sys.argv[1], sys.argv[2]
    namespace: dict[str, Any] = {"__name__": CANDIDATE_MODULE, "__builtins__": builtins}
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, path, "exec", dont_inherit=True), namespace)
        function = namespace[entry_point]
    except BaseException as e:
        channel.send_frame(replies, {"load_error": _describe(e)[:300]})
        os._exit(0)
    channel.send_frame(replies, {"ready": True})
    while True:
        try:
            request = channel.recv_frame(requests)
        except channel.ChannelError:
            os._exit(0)
        try:
            channel.send_frame(replies, {"v": encode(function(*decoder.decode(request["a"]), **decoder.decode(request["k"])))})
        except channel.ChannelError:
            os._exit(0)
        except BaseException as e:  # raised by the solution, or a value JSON cannot carry (an int of 5000 digits)
            channel.send_frame(replies, {"e": _describe(e)[:200]})
