"""Waiting on file descriptors with ``poll`` (``select.select`` refuses any descriptor numbered 1024
or above, which a long-lived process that has opened many files, pipes and sockets reaches)."""

from __future__ import annotations

import select


def ready(fds: list[int], timeout_s: float, *, write: bool = False) -> list[int]:
    """The descriptors of ``fds`` ready to read (or to write) within ``timeout_s`` seconds; a
    descriptor whose other end closed or that errored counts as ready (the read or write that
    follows says which). [] on timeout."""
    poller = select.poll()
    events = select.POLLOUT if write else select.POLLIN
    for fd in fds:
        poller.register(fd, events)
    return [fd for fd, _ in poller.poll(max(0.0, timeout_s) * 1000.0)]
