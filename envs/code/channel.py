"""Length-prefixed JSON frames over pipes: the only link between the tester and the candidate
process of the tester path (`envs.code.tester`). It runs in the sandbox, on both ends (its source
is sent there as text: standard library only, no project imports).

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. With a deadline, reading
and writing wait at most until then (the file descriptor must be non-blocking), and frames over
a size cap are refused, so a candidate that hangs, floods or breaks the framing costs its peer a
bounded wait and ends the conversation, never the peer.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any


MAX_FRAME_BYTES = 16 << 20


class ChannelError(Exception):
    """The channel cannot be used any more. ``reason``: ``"closed"`` (the peer is gone),
    ``"timeout"`` (the deadline passed) or ``"malformed"`` (not a valid frame)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def _wait(fd: int, deadline: float | None, writing: bool) -> None:
    if deadline is None:
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise ChannelError("timeout", "no answer before the deadline")
    poller = select.poll()  # not select.select, which refuses descriptors numbered 1024 or above
    poller.register(fd, select.POLLOUT if writing else select.POLLIN)
    if not poller.poll(left * 1000.0):
        raise ChannelError("timeout", "no answer before the deadline")


def _write_all(fd: int, data: bytes, deadline: float | None) -> None:
    view = memoryview(data)
    while view:
        _wait(fd, deadline, writing=True)
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        except OSError as e:  # BrokenPipeError: the reader is gone
            raise ChannelError("closed", f"the peer closed the channel ({type(e).__name__})") from None
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, need = [], n
    while need:
        _wait(fd, deadline, writing=False)
        try:
            chunk = os.read(fd, min(need, 1 << 20))
        except BlockingIOError:
            continue
        except OSError as e:
            raise ChannelError("closed", f"the channel failed ({type(e).__name__})") from None
        if not chunk:
            raise ChannelError("closed", "the peer closed the channel")
        chunks.append(chunk)
        need -= len(chunk)
    return b"".join(chunks)


def send_frame(fd: int, message: Any, deadline: float | None = None) -> None:
    """Write one frame holding ``message`` (JSON-serialisable data)."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    _write_all(fd, struct.pack(">I", len(body)) + body, deadline)


def recv_frame(fd: int, deadline: float | None = None, max_bytes: int = MAX_FRAME_BYTES) -> Any:
    """Read one frame; `ChannelError` when the peer is gone, late, or sends something malformed."""
    (size,) = struct.unpack(">I", _read_exact(fd, 4, deadline))
    if size > max_bytes:
        raise ChannelError("malformed", f"a {size}-byte frame exceeds the {max_bytes}-byte cap")
    body = _read_exact(fd, size, deadline)

    def no_constants(name: str) -> Any:
        raise ValueError(f"bare {name}")

    try:
        return json.loads(body, parse_constant=no_constants)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ChannelError("malformed", f"a frame that is not JSON: {str(e)[:100]}") from None
