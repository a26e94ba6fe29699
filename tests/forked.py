"""``rlvr ARGV`` in a process of its own without a new interpreter's imports, for tests.

A test that needs a real process (to kill it, signal it, read its exit status and console) but not a
fresh interpreter runs `rlvr.cli.main` in a process forked from the fork server the generation worker
uses (`rlvr.rollout.worker.worker_context`): that server imported torch and transformers once for the
test process, where ``python -m rlvr.cli`` imports them again for every run (about 9 s of CPU on a
2-core machine). The child takes the environment and working directory it is given, its console goes
to pipes, and it dies with the test process.

What stays a command (``python -m rlvr.cli``): a test of what a fresh interpreter does (its exit with
threads still running, imports hidden or made to fail, the console script), and the cluster lane,
whose point is the commands a user types.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
from typing import Any


class _Inherited:
    """A file descriptor a forked child is given with its start (pickled as a duplicate of it)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return (_Inherited._detach, (reduction.DupFd(self.fd),))

    @staticmethod
    def _detach(dup: Any) -> int:
        return dup.detach()


def _become(environ: dict[str, str], cwd: str, out: _Inherited, err: _Inherited | None, new_session: bool,
            testing_envs: bool) -> None:
    """In the forked child: take ``environ`` and ``cwd``, the console on ``out`` and ``err`` (None: /dev/null), a
    session of its own if ``new_session``, the ``testing/*`` environments if ``testing_envs``, and the signals a
    fresh interpreter has."""
    if new_session:
        os.setsid()
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # (the fork server holds the trainer's shutdown signals)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rlvr.rollout.worker import _die_with_parent

    _die_with_parent()  # with the fork server, i.e. with the test process
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    from envs import faults

    faults.configure()  # (imported by the fork server before this environment was set)
    os.dup2(out, 1)
    os.dup2(err if err is not None else os.open(os.devnull, os.O_WRONLY), 2)
    for fd in {out, err} - {None}:
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    if testing_envs:
        import envs.testing

        envs.testing.register_testing_envs()


def _run_cli(argv: list[str], torchrun: list[str] | None, *become: Any) -> None:
    """In the forked child: ``python -m rlvr.cli ARGV``, or with ``torchrun`` (its flags) ``torchrun FLAGS -m rlvr.cli
    ARGV`` as torchrun's own ``--run-path`` runs it: each rank forked from this launcher (``--start-method fork``),
    which imported the training modules once for all of them, running ``rlvr/cli.py`` as ``__main__``."""
    _become(*become)
    if torchrun is None:
        from rlvr.cli import main

        sys.exit(main(argv))
    import rlvr.cli
    import rlvr.train.harness  # noqa: F401  (what every rank imports first, imported once here)
    import rlvr.train.policy_gradient  # noqa: F401
    from torch.distributed.run import main as torchrun_main

    torchrun_main([*torchrun, "--start-method", "fork", "--run-path", rlvr.cli.__file__, *argv])


class ForkedCLI:
    """``rlvr ARGV`` in a process forked from the fork server: the parts of `subprocess.Popen` the
    tests use (``pid``, ``stdout`` and ``stderr`` as text, ``poll``, ``wait``, ``returncode``, signals).

    ``stderr``: "devnull", "pipe" (its own pipe) or "stdout" (into ``stdout``'s); ``log``: ``stdout`` into this
    file instead of a pipe (``self.stdout`` is then None); ``new_session``: as ``start_new_session`` (its own
    process group, for a signal to the whole group); ``testing_envs``: with the ``testing/*`` environments
    registered (`envs.testing`); ``torchrun``: torchrun's flags (``["--nproc-per-node", "2"]``), to run
    ``torchrun FLAGS -m rlvr.cli ARGV`` with its ranks forked (`_run_cli`)."""

    def __init__(self, argv: list[str], env: dict[str, str], stderr: str = "devnull", cwd: str | os.PathLike | None = None,
                 new_session: bool = False, testing_envs: bool = False, torchrun: list[str] | None = None,
                 log: str | os.PathLike | None = None):
        from rlvr.rollout.worker import start_holding_shutdown_signals, worker_context

        ctx = worker_context("rlvr.rollout.engines.serve", "rlvr.cli")
        read, write = (None, os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)) if log is not None else os.pipe()
        err_read, err_write = os.pipe() if stderr == "pipe" else (None, write if stderr == "stdout" else None)
        self._process = ctx.Process(target=_run_cli, name="rlvr-test-cli", daemon=False,  # (a daemon could not start workers)
                                    args=(argv, torchrun, env, str(cwd or os.getcwd()), _Inherited(write),
                                          None if err_write is None else _Inherited(err_write), new_session, testing_envs))
        try:
            start_holding_shutdown_signals(self._process)  # (a fork server started here holds them, as the worker's does)
        finally:
            for fd in {write, err_write} - {None}:
                os.close(fd)
        self.pid, self._torchrun = self._process.pid, torchrun is not None
        atexit.register(self.kill)  # one a test left running must not keep the test process waiting for it at its exit
        self.stdout = open(read, encoding="utf-8", errors="replace") if read is not None else None
        self.stderr = open(err_read, encoding="utf-8", errors="replace") if err_read is not None else None

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return None if self._process.is_alive() else self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.is_alive():
            raise subprocess.TimeoutExpired("rlvr (forked)", timeout)
        return self._process.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """Its whole console (stdout, stderr) once it exits; killed past ``timeout``."""
        import concurrent.futures as cf

        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        with cf.ThreadPoolExecutor(len(streams)) as pool:  # both pipes read at once: a full one would stall the child
            reads = [pool.submit(s.read) for s in streams]
            try:
                self.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                self.wait(60)
                raise
            texts = [r.result() for r in reads]
        for stream in streams:
            stream.close()
        return texts[0], texts[1] if len(texts) > 1 else None

    def send_signal(self, sig: int) -> None:
        if self._process.is_alive():
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL it, and with ``torchrun`` every rank under it (killed with their launcher, as a user's kill of
        the session would; an rlvr process's own children are left to notice their parent's death)."""
        if self._torchrun and self._process.is_alive():
            import psutil

            with contextlib.suppress(psutil.NoSuchProcess):
                for rank in psutil.Process(self.pid).children(recursive=True):
                    with contextlib.suppress(psutil.NoSuchProcess):
                        rank.kill()
        self.send_signal(signal.SIGKILL)


def run_forked(argv: list[str], env: dict[str, str], timeout: float, cwd: str | os.PathLike | None = None,
               testing_envs: bool = False, torchrun: list[str] | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run` of ``rlvr ARGV`` (output captured as text) in a `ForkedCLI`; killed past ``timeout``."""
    proc = ForkedCLI(argv, env, stderr="pipe", cwd=cwd, testing_envs=testing_envs, torchrun=torchrun)
    stdout, stderr = proc.communicate(timeout)
    return subprocess.CompletedProcess([*(["torchrun", *torchrun, "-m", "rlvr.cli"] if torchrun else ["rlvr"]), *argv],
                                       proc.returncode, stdout, stderr)
