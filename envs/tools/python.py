"""The Python tool: the model runs code in a sandbox while it reasons.

Call syntax (what a model writes, and where its turn stops)::

    ```python
    print(48213 * 7719)
    ```

A call is a fenced block opened by a line ```` ```python ```` and closed by a line ```` ``` ````; the
model's turn ends at the closing fence (the stop string ``"\\n```\\n"``). The block runs as a
fresh program (no state is kept between calls) in a `sandboxes` backend, and what it printed
comes back as the observation::

    ```output
    372156147
    ```

Output longer than ``output_chars`` is cut (``...[N more characters]``); an exception shows the
end of its traceback; a timeout, memory limit, output flood, killing signal or sandbox failure is
reported as one bracketed line (``[timeout: stopped after 3 s]``). Every call is recorded as a
`envs.episode.ToolCall` with its status, so errors and timeouts are counted, never hidden.
"""

from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

import sandboxes
from envs.code.extract import ExtractedCode
from envs.episode import ToolCall

CALL_END = "\n```\n"
"""The stop string that ends a model turn at a tool call."""

OUTPUT_OPEN, OUTPUT_CLOSE = "```output\n", "```\n"

_BUILD_LOCK = threading.Lock()  # episodes step in threads: build one backend, not one per thread
_SANDBOX_FRAME = re.compile(r'^  File "<string>", line \d+, in \w+\n', re.M)  # the sandbox's own frames, not the model's code
_CALL = re.compile(r"^```python[ \t]*\n(?P<code>(?:.*?\n)??)```[ \t]*$", re.M | re.S)


def find_call(turn: str) -> ExtractedCode | None:
    """The call that ended ``turn``: the code of its last ```` ```python ```` block (with the
    code's span in the turn), when nothing but whitespace follows the block's closing fence.
    None when the turn is not a tool call."""
    blocks = list(_CALL.finditer(turn))
    if not blocks or turn[blocks[-1].end():].strip():
        return None
    m = blocks[-1]
    return ExtractedCode(m.group("code"), m.start("code"), m.end("code"))


def blank_calls(text: str) -> str:
    """``text`` with every tool call's characters turned into spaces (line breaks kept), so that
    an answer is read from the model's prose, never from the code it ran. Same length as ``text``."""
    return _CALL.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def render_output(body: str) -> str:
    """The observation for a call that printed ``body`` (already cut to the budget)."""
    return OUTPUT_OPEN + body + ("" if not body or body.endswith("\n") else "\n") + OUTPUT_CLOSE


def cut(text: str, budget: int, *, keep: str = "head") -> tuple[str, bool]:
    """``text`` within ``budget`` characters, marking what was dropped; ``keep="tail"`` keeps the
    end (where a traceback says what went wrong)."""
    if len(text) <= budget:
        return text, False
    more = len(text) - budget
    return (text[:budget] + f"...[{more} more characters]\n", True) if keep == "head" else (f"[{more} characters before]...\n" + text[-budget:], True)


class PythonTool:
    """Runs the model's code in a sandbox and renders what happened as an observation.

    Picklable: the sandbox backend is built on first use in each process.

    Args:
        backend: Sandbox backend name (``"auto"``: the process-wide best available, see `sandboxes`).
        wall_s: Wall-clock (and CPU) seconds per call.
        memory_mb: Memory per call.
        output_chars: Longest output shown to the model.
        processes: Processes a call may have alive at once (fork bombs stop here).
        backend_options: Options for a backend built for this tool (e.g. ``{"workers": 4}``).
    """

    name = "python"
    stop = (CALL_END,)

    def __init__(self, backend: str = "auto", wall_s: float = 3.0, memory_mb: int = 256, output_chars: int = 400,
                 processes: int = 16, backend_options: dict[str, Any] | None = None):
        if output_chars < 16:
            raise ValueError(f"python tool: output_chars must be at least 16, got {output_chars}")
        self.backend_name = backend
        self.backend_options = dict(backend_options or {})
        self.output_chars = output_chars
        # the sandbox keeps a little more than is shown, so a flood is cut here, not an error
        self.limits = sandboxes.Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=memory_mb, processes=processes,
                                       output_bytes=max(4 * output_chars, 16384))
        self._built: tuple[int, sandboxes.Backend] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": None}  # workers and pipes stay in their process

    def _backend(self) -> sandboxes.Backend:
        with _BUILD_LOCK:
            if self._built is None or self._built[0] != os.getpid():
                shared = self.backend_name == "auto" and not self.backend_options
                self._built = (os.getpid(), sandboxes.default_backend() if shared else sandboxes.make_backend(self.backend_name, **self.backend_options))
            return self._built[1]

    def run(self, code: str) -> tuple[str, ToolCall]:
        """Run ``code``; returns the observation text and the call's record. Never raises for
        what the program does; a sandbox that cannot start is a ``sandbox_error`` call."""
        start = time.perf_counter()
        try:
            ex = self._backend().run(sandboxes.Job.make(code, limits=self.limits))
        except sandboxes.SandboxError as e:
            ex = sandboxes.Execution.error(str(e))
        body, status, truncated = self._describe(ex)
        latency = time.perf_counter() - start
        record = ToolCall(self.name, status, ex.wall_s or latency, body, truncated, latency)
        return render_output(body), record

    def _describe(self, ex: sandboxes.Execution) -> tuple[str, str, bool]:
        """(what the model is shown, the call's status, whether output was cut)."""
        S = sandboxes.ExecStatus
        stdout = ex.stdout.decode("utf-8", "replace")
        stderr = ex.stderr.decode("utf-8", "replace")
        if ex.status is S.OK and ex.exit_code == 0:
            body, truncated = cut(stdout or stderr, self.output_chars)
            return body, "ok", truncated
        if ex.status is S.OK:  # ran and failed: show what it printed, then the end of the traceback
            shown, cut_out = cut(stdout, self.output_chars // 2)
            stderr = _SANDBOX_FRAME.sub("", stderr).strip() or f"exit status {ex.exit_code}"
            tail, cut_err = cut(stderr, self.output_chars - len(shown), keep="tail")
            return _lines(shown, tail), "error", cut_out or cut_err
        notes = {
            S.TIMEOUT: ("timeout", f"[timeout: stopped after {self.limits.wall_s:g} s]"),
            S.MEMORY: ("memory", f"[memory limit exceeded: {self.limits.memory_mb} MB]"),
            S.OUTPUT_LIMIT: ("output_limit", "[output limit exceeded: stopped]"),
            S.KILLED: ("killed", f"[killed by {ex.info.get('signal', 'a signal')}]"),
        }
        status, note = notes.get(ex.status, ("sandbox_error", "[the sandbox failed to run this call]"))
        shown, truncated = cut(stdout, self.output_chars)
        return _lines(shown, note), status, truncated or ex.status is S.OUTPUT_LIMIT


def _lines(*parts: str) -> str:
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts if p)
