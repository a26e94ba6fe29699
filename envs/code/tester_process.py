"""The tester process of the tester path, as it runs in the sandbox: the job's main program
(`run_tester`), which runs the tests and calls the candidate, a fresh interpreter it starts
(`envs.code.candidate_process`).

Standard library only: `envs.code.tester` sends this source into the sandbox with the modules it
needs (`envs.code.channel`, `envs.code.decoder`, `envs.code.encoder`), which it passes to
`run_tester` as arguments; nothing here imports project code.

The tester, before any candidate code exists:

1. reads its spec (the tests, the trusted setup, the run's secret token) from stdin, which is then
   closed: the tests never touch the file system;
2. makes itself non-dumpable, so that no process of its uid can read its memory, open its file
   descriptors through ``/proc`` or attach to it, and lets SIGINT kill it rather than raise into
   a test;
3. removes the job's own (writable) directory from ``sys.path``, where the candidate could
   otherwise plant ``random.py`` for a test's ``import random``, and seeds ``random`` with
   `TESTS_SEED`, so that tests drawing unseeded random inputs (HumanEval 38, 50, 53) give a
   completion the same verdict every time;
4. runs the trusted setup (HumanEval's prompt helpers, imports the tests assume).

Then it starts the candidate as a new interpreter (exec, so nothing of the tester's memory, which
holds the tests and the token, is copied into it), with a pipe pair as its only link, stdin,
stdout and stderr on ``/dev/null``, and its own session; and it runs the tests. ``candidate(...)``
in a test sends the arguments as data and reads back the return value as data (`Candidate`): an
object with behaviour (a custom ``__eq__``, a lying ``__iter__``) cannot cross, and nothing the
candidate sends is ever executed. Each test's outcome goes, stamped with the token, to a private
copy of the job's stdout for which the candidate has no descriptor; the verdict is decided on the
trusted side from those records (`envs.code.tester`).
"""

from __future__ import annotations

import builtins
import io
import json
import os
import signal
import sys
import time
from typing import Any

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
TESTS_SEED = 0


class CandidateError(Exception):
    """The candidate raised, or returned something that is not data: the test sees an exception."""


class CandidateGone(BaseException):
    """The candidate exited, missed the deadline or broke the channel: it answers nothing more.
    A BaseException, so a test's ``except Exception`` does not swallow it (and the test fails
    whatever it catches: see `run_tester`)."""


class TesterFault(BaseException):
    """The tests asked for something the channel cannot carry (an argument that is not data): a
    fault of the problem, never of the candidate."""


def _describe(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class Candidate:
    """The function under test as the tests see it: each call goes to the candidate process as
    data and its return value comes back as plain built-in data.

    Args:
        argv: Command that starts the candidate process (`serve_candidate`).
        deadline: `time.monotonic` time after which the candidate is stopped and every call fails.
    """

    def __init__(self, argv: list[str], deadline: float, channel: Any, decoder: Any, encode: Any):
        self.channel, self.decoder, self.encode = channel, decoder, encode
        self.deadline = deadline
        # posix_spawn, not subprocess (an import that costs every job milliseconds): the child
        # gets the two pipe ends on 0 and 1 and /dev/null on 2; every other descriptor of ours
        # (the records, the other pipe ends) is close-on-exec
        requests_r, self.to_candidate = os.pipe()
        self.from_candidate, replies_w = os.pipe()
        try:
            self.pid = os.posix_spawn(argv[0], argv, {}, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, requests_r, 0), (os.POSIX_SPAWN_DUP2, replies_w, 1),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        finally:
            os.close(requests_r)
            os.close(replies_w)
        os.set_blocking(self.to_candidate, False)
        os.set_blocking(self.from_candidate, False)
        self.ready = False
        self.gone: str | None = None  # why the candidate answers nothing more
        self.load_error: str | None = None
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.gone:
            raise CandidateGone(f"the candidate {self.gone}")
        request = {"a": self.encode(list(args)), "k": self.encode(kwargs)}
        try:
            self.decoder.decode(request["a"], opaque=False)
            self.decoder.decode(request["k"], opaque=False)
        except self.decoder.DecodeError as e:
            raise TesterFault(f"a test passes the candidate something that is not data: {e}") from None
        try:
            if not self.ready:
                hello = self._receive(("ready", "load_error"))
                if "load_error" in hello:
                    self.load_error = str(hello["load_error"])[:300]
                    self.stop(f"did not load: {self.load_error}")
                    raise CandidateGone(f"the candidate {self.gone}")
                self.ready = True
            self.channel.send_frame(self.to_candidate, request, self.deadline)
            reply = self._receive(("v", "e"))
        except self.channel.ChannelError as e:
            self.stop({"closed": "exited", "timeout": "did not answer in time"}.get(e.reason, f"broke the channel ({e})"))
            raise CandidateGone(f"the candidate {self.gone}") from None
        self.calls += 1
        if "e" in reply:
            raise CandidateError(f"the candidate raised {str(reply['e'])[:200]}")
        try:
            return self.decoder.decode(reply["v"], opaque=False)
        except self.decoder.NotData as e:
            raise CandidateError(f"the candidate returned {e}") from None
        except self.decoder.DecodeError as e:
            self.stop(f"sent an unreadable value ({e})")
            raise CandidateGone(f"the candidate {self.gone}") from None

    def _receive(self, keys: tuple[str, ...]) -> dict:
        message = self.channel.recv_frame(self.from_candidate, self.deadline)
        if type(message) is not dict or len(message) != 1 or next(iter(message)) not in keys:
            raise self.channel.ChannelError("malformed", f"expected one of {keys}")
        return message

    def stop(self, reason: str) -> None:
        """Kill the candidate (and its process group) and refuse every later call."""
        if self.gone is not None:
            return
        self.gone = reason
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        for fd in (self.to_candidate, self.from_candidate):
            os.close(fd)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _read_stdin() -> bytes:
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return b"".join(chunks)


def _make_undumpable() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _without_job_dirs(path: list[str]) -> list[str]:
    """``sys.path`` less the job's directory, the working directory and anything under them."""
    mine = {os.path.realpath(os.path.dirname(os.path.abspath(sys.argv[0]))), os.path.realpath(os.getcwd())}

    def inside(entry: str) -> bool:
        real = os.path.realpath(entry)
        return any(os.path.commonpath([real, d]) == d for d in mine)

    return [p for p in path if p not in ("", ".") and not inside(p)]


def run_tester(channel: Any, decoder: Any, encode: Any) -> None:
    """The tester's main program (see the module docstring); never returns."""
    records = os.fdopen(os.dup(1), "w", encoding="utf-8")  # the verdict channel: only this process holds it
    sys.stdout = io.StringIO()  # the tests' own prints
    spec = json.loads(_read_stdin())
    token, prefix = spec["token"], spec["record_prefix"]

    def emit(**record: Any) -> None:
        records.write(prefix + json.dumps({"t": token, **record}) + "\n")
        records.flush()

    def finish() -> None:
        records.flush()
        os._exit(0)

    start = time.monotonic()
    try:
        _make_undumpable()
    except (OSError, ImportError, AttributeError) as e:
        emit(isolation_error=_describe(e))
        finish()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.path[:] = _without_job_dirs(sys.path)
    import random

    random.seed(TESTS_SEED)
    namespace: dict[str, Any] = {"__name__": "__tester__", "__builtins__": builtins}
    try:
        exec(compile(spec["setup"], "<tester setup>", "exec", dont_inherit=True), namespace)
    except BaseException as e:  # trusted code failed: the problem is broken, not the candidate
        emit(setup_error=_describe(e)[:300])
        finish()
    emit(started=True)
    flags = ["-I", *(["-S"] if sys.flags.no_site else [])]
    program = os.path.abspath(spec["candidate_file"])
    try:
        candidate = Candidate([sys.executable, *flags, "-c", spec["candidate_program"], program, spec["entry_point"]],
                              start + float(spec["budget_s"]), channel, decoder, encode)
    except Exception as e:  # e.g. no posix_spawn on this platform: the sandbox's fault, not the candidate's
        emit(tester_error=f"could not start the candidate: {_describe(e)}")
        finish()
    for name in spec["names"]:
        namespace[name] = candidate
    for i, code in enumerate(spec["tests"]):
        ok, detail = True, ""
        try:
            exec(compile(code, f"<test {i}>", "exec", dont_inherit=True), namespace)
        except TesterFault as e:
            emit(tester_error=str(e)[:300])
            break
        except BaseException as e:  # an assert failed, the candidate raised, or it is gone
            ok, detail = False, _describe(e)
        if candidate.gone:  # whatever the test code caught: a candidate that died or hung fails
            ok, detail = False, detail or f"the candidate {candidate.gone}"
        emit(i=i, ok=ok, d=detail[:200])
    emit(done=True, calls=candidate.calls, load_error=candidate.load_error, gone=candidate.gone)
    candidate.stop("finished")
    finish()
