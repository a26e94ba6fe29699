"""A Hugging Face rollout engine in a process of its own: the generation worker of ``rollout.async``
with ``rollout.engine=hf``.

The child process (torch.multiprocessing; `worker_context`) holds its own copy of the policy and decodes with
rlvr's decoders (`rlvr.rollout.engines.hf.HFGenerateEngine`; ``rollout.hf.decode=auto`` measures the decoders
there, on the worker's own cores). Weights travel through shared memory: `WeightSlots` are copies of
the policy's state dict in shared memory; the trainer writes a new version into a slot (a memory
copy) and the worker copies the slot into its model when told to (`ProcessEngine.load_weights` with
a slot). Commands (generate, score, load) go over a pipe, one at a time; the results come back the
same way.

The worker is forked from a fork server (Python's ``forkserver`` start method) that imported torch,
transformers and rlvr's engine once, when the first worker started: a restarted worker, or the next
run's in the same Python process, starts in a fraction of a second instead of importing them again
(about 6 s on a 2-core machine: `scripts/bench_worker_start.py`). The server imports torch but runs
nothing (no thread pool, no CUDA context), so a fork of it is as clean as a fresh process; the
weight slots are `FlatSlot`s, a few file descriptors to send rather than one per tensor. Each worker
takes the trainer's environment variables and working directory as they are
when it starts (`_take_the_trainers_context`), as a spawned one would. Where there is no fork server
(Windows), workers are spawned.

`ProcessEngine` is an ordinary `RolloutEngine` (own weights, proven by `rlvr.rollout.sync.SyncProbe`
like any other). A worker that dies (killed, crashed in native code) is reported as a `WorkerDied`
naming its pid and signal; `ProcessEngine.restart` starts a new one on the same shared weights. The
worker also exits when the trainer's process dies (the pipe closes; on Linux it is killed with it).
"""

from __future__ import annotations

import atexit
import copy
import ctypes
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from rlvr.rollout.base import Completion, EngineCapabilities, EngineError, RolloutEngine, SamplingParams
from rlvr.rollout.weights import Weights, named_weights


class WorkerDied(EngineError):
    """The generation worker's process ended while work was asked of it; the message names it."""


class FlatSlot(dict):
    """One slot: its tensors by name, each a view into one shared-memory buffer per dtype. Pickled (to
    the worker) as those buffers and each view's place: one file descriptor a buffer rather than one
    a tensor (a model's few hundred tensors each cost a descriptor and a round trip to send)."""

    ALIGN_BYTES = 64  # each view starts on a 64-byte boundary, as an allocation of its own would

    def __init__(self, views: Mapping[str, torch.Tensor], buffers: list[torch.Tensor], places: list[tuple]):
        super().__init__(views)
        self.buffers = buffers
        self.places = places  # (name, buffer index, offset, shape) per view

    @classmethod
    def copy_of(cls, tensors: Mapping[str, torch.Tensor]) -> "FlatSlot":
        """A copy of ``tensors`` (on the CPU, detached) in fresh shared buffers."""
        sizes: dict[torch.dtype, int] = {}
        placed = []
        for name, t in tensors.items():
            step = max(1, cls.ALIGN_BYTES // t.element_size())
            offset = -(-sizes.get(t.dtype, 0) // step) * step
            sizes[t.dtype] = offset + t.numel()
            placed.append((name, t.dtype, offset, tuple(t.shape)))
        order = list(sizes)
        buffers = [torch.empty(max(1, sizes[d]), dtype=d).share_memory_() for d in order]  # (an empty storage cannot be shared)
        places = [(name, order.index(d), offset, shape) for name, d, offset, shape in placed]
        slot = cls._build(buffers, places)
        with torch.no_grad():
            for name, t in tensors.items():
                slot[name].copy_(t.detach())
        return slot

    @classmethod
    def _build(cls, buffers: list[torch.Tensor], places: list[tuple]) -> "FlatSlot":
        views = {}
        for name, index, offset, shape in places:
            numel = 1
            for size in shape:
                numel *= size
            views[name] = buffers[index][offset:offset + numel].view(shape)
        return cls(views, buffers, places)

    def __reduce__(self):
        return (FlatSlot._build, (self.buffers, self.places))


class WeightSlots:
    """``n`` copies of the policy's weights in shared memory, by name.

    Args:
        weights: The policy (a module: its ``state_dict``, so that a module copy loads it strictly)
            or a mapping of names to tensors (e.g. `rlvr.models.lora.MergedWeights`).
        n: Slots; version v of the policy is staged in slot ``v % n`` by the caller.
        full_state: A module's whole ``state_dict`` (tied and buffer entries included; for a
            `ProcessEngine`) rather than its parameters by name (what a vLLM server loads).
    """

    def __init__(self, weights: Weights, n: int, full_state: bool = True):
        first = self._read(weights, full_state)
        self.full_state = full_state
        self.slots: list[dict[str, torch.Tensor]] = [FlatSlot.copy_of(first) for _ in range(n)]

    @staticmethod
    def _read(weights: Weights, full_state: bool) -> Mapping[str, torch.Tensor]:
        if full_state and isinstance(weights, torch.nn.Module):
            return weights.state_dict()
        return dict(named_weights(weights))

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.slots[i]

    def stage(self, i: int, weights: Weights) -> None:
        """Copy ``weights`` into slot ``i`` (same names and shapes as the first)."""
        target = self.slots[i]
        with torch.no_grad():
            for name, tensor in self._read(weights, self.full_state).items():
                target[name].copy_(tensor.detach())

    def index(self, weights: Any) -> int | None:
        """Which slot ``weights`` is (by identity), or None."""
        return next((i for i, s in enumerate(self.slots) if s is weights), None)

    @property
    def nbytes(self) -> int:
        """Bytes one slot holds (what one push copies)."""
        return sum(t.numel() * t.element_size() for t in self.slots[0].values())


@dataclass(frozen=True)
class WorkerSettings:
    """How the child process runs its engine (`rlvr.rollout.config.HFEngineConfig` and ``rollout.async``).

    Attributes:
        decode / sync_every / max_batch_sequences: The hf engine's settings.
        cpus: Cores to pin the worker to (empty: not pinned).
        threads: Torch threads in the worker (0: torch's default).
        device: Where the worker's copy runs (the trainer's device).
    """

    decode: str = "auto"
    sync_every: int = 8
    max_batch_sequences: int = 256
    cpus: tuple[int, ...] = ()
    threads: int = 0
    device: str = "cpu"


def _positive_int(text: str | None) -> int:
    return int(text) if text and text.isdigit() and int(text) > 0 else 0


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when the process that started it dies (PR_SET_PDEATHSIG):
    the fork server, which exits when the trainer does (its pipe from the trainer closes)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # elsewhere the closed pipe ends the worker at its next command


SHUTDOWN_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
"""What a terminal (Ctrl-C, a hangup), ``timeout`` or SLURM send to the whole process group: the trainer
handles them (it finishes the step, checkpoints and closes the worker), so the worker ignores them."""


def _leave_shutdown_to_the_trainer() -> None:
    """In the worker: ignore `SHUTDOWN_SIGNALS` (blocked by `ProcessEngine._start` until now, so none
    arrived while the process started), so a signal sent to the process group does not kill it
    mid-round (a run that should checkpoint would fail, naming a dead worker); it still dies with
    the trainer (`_die_with_parent`) and is killed by it when stuck."""
    for sig in SHUTDOWN_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SHUTDOWN_SIGNALS)


PRELOADED = ("rlvr.rollout.worker", "rlvr.rollout.engines.hf", "envs.faults")
"""What the fork server imports once, for every worker it forks (with the policy's and tokenizer's own modules)."""


def worker_context(*modules: str) -> Any:
    """The multiprocessing context workers start in: the fork server, which imports `PRELOADED` and
    ``modules`` when it starts (the first worker of this Python process); ``spawn`` where there is none."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return torch.multiprocessing.get_context("spawn")
    ctx = torch.multiprocessing.get_context("forkserver")
    # (no effect once the server runs; `rlvr.rollout.frozen_imports` last: it freezes what the others made)
    ctx.set_forkserver_preload([*dict.fromkeys((*PRELOADED, *modules)), "rlvr.rollout.frozen_imports"])
    return ctx


def start_holding_shutdown_signals(process: Any) -> None:
    """Start ``process`` with `SHUTDOWN_SIGNALS` blocked, which it inherits (and so does the fork server
    a first start launches, with every child it forks) until it decides what they do."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # its own start unblocks them in this thread: it must run before they are blocked
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SHUTDOWN_SIGNALS)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _take_the_trainers_context(environ: Mapping[str, str], cwd: str) -> None:
    """In the worker: the trainer's environment variables and working directory as they were when it
    started this worker (the fork server's are those of the first start), as a spawned process has them."""
    os.environ.clear()
    os.environ.update(environ)
    try:
        os.chdir(cwd)
    except OSError:
        pass  # a folder removed since: the worker reads no relative path


def _worker_main(conn: Any, settings: WorkerSettings, first_start: bool, decoder_choice: dict | None, environ: Mapping[str, str],
                 cwd: str) -> None:
    """The child process: take the policy's copy and the weight slots (the first message), build the
    engine, then serve commands until ``close`` or the trainer is gone."""
    _take_the_trainers_context(environ, cwd)
    from envs import faults
    from rlvr import warning_lines

    warning_lines.install()  # its warnings print as the trainer's do

    faults.configure_worker(first_start)
    _die_with_parent()
    _leave_shutdown_to_the_trainer()
    try:
        model, tokenizer, slots = conn.recv()
    except (EOFError, OSError):  # the trainer is gone
        return
    if settings.cpus:
        os.sched_setaffinity(0, settings.cpus)
    threads = settings.threads or _positive_int(environ.get("OMP_NUM_THREADS"))
    if threads:  # (torch's default was read by the fork server when it started: the trainer's setting now wins)
        torch.set_num_threads(threads)
    from rlvr.rollout.engines.hf import HFGenerateEngine

    model = model.to(settings.device)
    engine = HFGenerateEngine(model, tokenizer, settings.max_batch_sequences, decode=settings.decode, sync_every=settings.sync_every)
    if decoder_choice:
        engine.restore_choice(decoder_choice)
    conn.send(("ready", (os.getpid(), os.getppid())))  # (the parent: the fork server, or the trainer where workers are spawned)
    while True:
        try:
            command, args = conn.recv()
        except (EOFError, OSError):  # the trainer is gone
            return
        try:
            if command == "close":
                conn.send(("ok", None))
                return
            if command == "load":
                with torch.no_grad():
                    model.load_state_dict(slots[args[0]])
                answer: Any = None
            elif command == "generate":
                faults.reached("generate_call")
                answer = (engine.generate_ids(*args), engine.choice.as_dict() if engine.choice is not None else None)
            elif command == "score":
                answer = engine.score(*args)
            elif command == "describe":
                answer = engine.describe()
            else:
                raise ValueError(f"unknown command {command!r}")
            conn.send(("ok", answer))
        except Exception as e:  # reported to the trainer, which raises it
            conn.send(("error", f"{type(e).__name__}: {e}"))


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc here: not known to be dead


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ProcessEngine(RolloutEngine):
    """`RolloutEngine` whose Hugging Face model and decoders run in a child process.

    Args:
        model: The policy (copied once into shared memory for the child; later weights come
            through ``slots``).
        tokenizer: Its tokenizer (prompts are tokenized here; the child decodes completions).
        slots: The shared `WeightSlots` the trainer stages versions in; the last slot is this
            engine's own, used by `load_weights` with weights that are not a slot.
        settings: `WorkerSettings`.
        decoder_choice: What ``auto`` chose in an earlier run (a resume decodes as it did).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, slots: WeightSlots, settings: WorkerSettings,
                 decoder_choice: dict | None = None):
        self.capabilities = EngineCapabilities(own_weights=True, takes_adapters=True)
        self.tokenizer = tokenizer
        self.slots = slots
        self.settings = settings
        self.choice: Any = None
        self._saved_choice = decoder_choice
        self._context = _context_length(model)
        self._model = copy.deepcopy(model).to("cpu").requires_grad_(False).share_memory()
        self._lock = threading.Lock()
        self.starts = 0
        self._start()

    # -- the child process --------------------------------------------------------------------

    def _start(self) -> None:
        ctx = worker_context(type(self._model).__module__, type(self.tokenizer).__module__)
        self._parent_pid = None  # (known once this worker is ready: a worker that dies before names no fork server)
        self._conn, child_conn = ctx.Pipe()
        # (the model and the slots go over the pipe once it runs, not with the start: a fork server takes
        # at most 252 file descriptors with a start, and each shared tensor is one)
        self._process = ctx.Process(target=_worker_main, name="rlvr-generation-worker", daemon=False,
                                    args=(child_conn, self.settings, self.starts == 0, self._choice_dict(), dict(os.environ), os.getcwd()))
        start_holding_shutdown_signals(self._process)
        atexit.register(self._stop_at_exit)  # (once: a bound method of the same engine is the same handler to unregister)
        child_conn.close()
        self.starts += 1
        try:
            self._conn.send((self._model, self.tokenizer, self.slots.slots))
        except (BrokenPipeError, OSError):
            raise self._died() from None
        kind, (self.pid, self._parent_pid) = self._receive()

    def _choice_dict(self) -> dict | None:
        return self.choice.as_dict() if self.choice is not None else self._saved_choice

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def restart(self) -> None:
        """Start a new worker on the same shared weights (after a death); it holds no version until
        the next `load_weights`."""
        self._stop(wait_s=5)
        with self._lock:  # a call from another thread (the trainer scoring the probe) waits for the new worker to be ready
            self._start()

    def _died(self) -> WorkerDied:
        self._process.join(timeout=5)
        reason = _exit_reason(self._process.exitcode)
        parent = self._parent_pid
        if self._process.exitcode == 255 and parent not in (None, os.getpid()) and not _running(parent):
            # a fork server that dies takes its workers with it (they die with their parent), and cannot report how they ended
            reason = f"its fork server (pid {parent}) died, and the worker with it (a new server starts with the next worker)"
        return WorkerDied(f"the generation worker (pid {self._process.pid}, hf engine) died: {reason}")

    def _receive(self) -> tuple[str, Any]:
        while not self._conn.poll(0.5):
            if not self._process.is_alive():
                raise self._died()
        try:
            status, answer = self._conn.recv()
        except (EOFError, OSError):
            raise self._died() from None
        if status == "error":
            raise EngineError(f"the generation worker (pid {self._process.pid}) failed: {answer}")
        return status, answer

    def _call(self, command: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((command, args))
            except (BrokenPipeError, OSError):
                raise self._died() from None
            return self._receive()[1]

    # -- the engine contract ----------------------------------------------------------------------

    def generate_ids(self, prompt_ids: Sequence[list[int]], n: int, sampling: SamplingParams) -> list[Completion]:
        completions, choice = self._call("generate", [list(p) for p in prompt_ids], n, sampling)
        if choice is not None and self.choice is None:
            from rlvr.rollout.decoding import DecoderChoice

            self.choice = DecoderChoice.from_dict(choice)
        return completions

    def score(self, prompt_ids: list[list[int]], completion_ids: list[list[int]]) -> list[list[float]]:
        return self._call("score", prompt_ids, completion_ids)

    def load_weights(self, model: Any) -> None:
        """Take weights: a slot of `slots` is loaded by the worker from shared memory as it is;
        anything else is first copied into this engine's own slot (the last one)."""
        index = self.slots.index(model)
        if index is None:
            index = len(self.slots) - 1
            self.slots.stage(index, model)
        self._call("load", index)

    def restore_choice(self, saved: dict) -> None:
        """Decode with the decoder an earlier run chose (passed to the worker when it starts next)."""
        self._saved_choice = saved

    @property
    def context_length(self) -> int | None:
        return self._context

    def describe(self) -> dict[str, Any]:
        return {**self._call("describe"), "process": "generation worker", "pid": self._process.pid}

    def close(self) -> None:
        self._stop(wait_s=10)

    def _stop_at_exit(self) -> None:
        """Registered while a worker runs: at the interpreter's exit, before multiprocessing waits for its
        children (its handler was registered first, so it runs after this one), a worker nobody closed is
        stopped; it would otherwise wait for a command forever, and the exit for it."""
        self._stop(wait_s=5)

    def _stop(self, wait_s: float) -> None:
        # a command in flight holds the lock (a worker hung in a decoder never answers): then it is killed
        if self._process.is_alive() and self._lock.acquire(timeout=1.0):
            try:
                self._conn.send(("close", ()))
                self._process.join(timeout=wait_s)
            except (BrokenPipeError, OSError):
                pass
            finally:
                self._lock.release()
        if self._process.is_alive():  # stuck (e.g. hung in a decoder): it cannot finish what it was doing anyway
            self._process.kill()
            self._process.join(timeout=wait_s)
        self._conn.close()
        atexit.unregister(self._stop_at_exit)


def _context_length(model: torch.nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


__all__ = ["ProcessEngine", "WeightSlots", "WorkerDied", "WorkerSettings"]
