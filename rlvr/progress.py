"""Progress of a loop, as a person reading it wants it: a redrawn bar (tqdm) on a terminal, and one
plain line per interval when stderr goes to a file or a pipe, where every redraw of a bar would
stay in the log (a quickstart wrote ~150 KB of them).

Every progress display of rlvr is made here (`progress_display`); the interval between lines is
``RLVR_PROGRESS_INTERVAL`` seconds (default 30; 0 prints a line on every update). A loop always
ends with a line that has its final count. The bars Hugging Face libraries draw themselves (loading
weights, writing shards, downloads) are turned off off a terminal (`quiet_library_bars`, called
by the CLI before they are imported).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, TextIO

INTERVAL_ENV = "RLVR_PROGRESS_INTERVAL"
HUB_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"  # read by huggingface_hub, and through it transformers, at import
DEFAULT_INTERVAL_S = 30.0


def line_interval() -> float:
    """Seconds between two progress lines when stderr is not a terminal."""
    raw = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_INTERVAL_S
    except ValueError:
        value = -1.0
    if value < 0:
        from rlvr import UserError

        raise UserError(f"{INTERVAL_ENV}={raw!r}: give a number of seconds >= 0 (default {DEFAULT_INTERVAL_S:g})")
    return value


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced by an object without a file descriptor, or closed
        return False


def quiet_library_bars(stream: TextIO | None = None) -> None:
    """Off a terminal, turn off the progress bars of huggingface_hub and transformers, which would
    otherwise redraw into the log (a setting of the user's own is kept). Takes effect for what is
    imported afterwards, including in child processes."""
    if not is_terminal(stream if stream is not None else sys.stderr):
        os.environ.setdefault(HUB_BARS_ENV, "1")


def progress_display(total: int | None, *, desc: str, unit: str, initial: int = 0, enabled: bool = True, leave: bool = True,
             stream: TextIO | None = None) -> Any:
    """A progress display with tqdm's ``update(n)``, ``set_postfix(dict)``, ``close()`` and context
    manager: a tqdm bar on a terminal, a `LineProgress` otherwise, nothing shown when not ``enabled``."""
    out = stream if stream is not None else sys.stderr
    if enabled and is_terminal(out):
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave, dynamic_ncols=True, file=out)
    return LineProgress(total, desc=desc, unit=unit, initial=initial, enabled=enabled, stream=out)


class LineProgress:
    """One line per interval: ``DESC: 40/100 steps (40%), 12 s, 3.3 steps/s, reward=0.512``.

    A line is written at the first update after ``interval`` seconds have passed since the last
    line (or the start), when the count reaches ``total``, and at ``close`` if the count moved
    since the last line."""

    def __init__(self, total: int | None, *, desc: str, unit: str, initial: int = 0, enabled: bool = True,
                 stream: TextIO | None = None, interval: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit, self.enabled = total, desc, unit, enabled
        self.n = self.start = self.shown = initial
        self.stream = stream if stream is not None else sys.stderr
        self.interval = line_interval() if interval is None else interval
        self.clock = clock
        self.t0 = self.last = clock()
        self.postfix = ""
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval or (self.total is not None and self.n >= self.total > self.shown):
            self._line(now)

    def set_postfix(self, values: dict[str, Any] | None = None, **more: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in {**(values or {}), **more}.items())

    def close(self) -> None:
        if not self.closed and self.n != self.shown:
            self._line(self.clock())
        self.closed = True

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _line(self, now: float) -> None:
        self.last, self.shown = now, self.n
        if not self.enabled:
            return
        elapsed = now - self.t0
        count = f"{self.n}/{self.total} {self.unit}s" if self.total is not None else f"{self.n} {self.unit}s"
        if self.total:
            count += f" ({100 * self.n / self.total:.0f}%)"
        rate = (self.n - self.start) / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.desc}: {count}", f"{elapsed:.0f} s", f"{rate:.3g} {self.unit}s per second"] + ([self.postfix] if self.postfix else [])
        print(", ".join(parts), file=self.stream, flush=True)


__all__ = ["DEFAULT_INTERVAL_S", "HUB_BARS_ENV", "INTERVAL_ENV", "LineProgress", "line_interval", "progress_display", "quiet_library_bars"]
