"""The training harness: everything a recipe needs that is not its algorithm.

One `Harness` per run owns

- the **run directory** (refusing to write over an existing run unless asked to resume or
  overwrite) and the resolved config;
- **accelerate** (one process, DDP over many GPUs, or ``torchrun`` with gloo on CPUs), threads,
  seeds, and the collectives recipes need (`reduce_sum`, `gather_counts`);
- the **device rule and failures** (`rlvr.train.harness_device.HarnessDevice`): ``device``
  resolved before anything is written, weights that cannot fit refused, FSDP routed on CPUs, and
  what a failure leaves (a checkpoint, or the out-of-memory advice, or a lost process named);
- **model loading** (`rlvr.train.trainable.HarnessModels`: recording every model's parameters,
  and every optimizer's state, in ``resources.json`` with the peak memory of the process);
- the **one gradient-accumulation routine**, `Harness.optimizer_step`
  (`rlvr.train.accumulation.HarnessAccumulation`): micro-batches, ``no_sync``, the zero-weight
  row that keeps a process without data in the gradient all-reduce, the process-count scaling,
  clipping, the optimizer and scheduler steps;
- **checkpoints** (`rlvr.train.checkpoint.HarnessCheckpoints`) of every registered component by
  name (``checkpoints/step-N/NAME/``), the RNG of every process and the recipe's own state, and
  resuming from them, also with another process count (`Harness.source` says where a component's
  weights come from);
- the **experiment trackers** (``log.report_to``, `rlvr.trackers`): started before any model
  loads (one that cannot start refuses the run), given the config, the provenance, every metric
  and every evaluation report;
- the **loop** (`Harness.run`, here): progress bar, periodic evaluation, logging, periodic and
  final checkpoints, SIGINT/SIGTERM (finish the step, save, stop: agreed by every process at the step
  boundary, whichever received it), a checkpoint on failure (a lost
  process instead stops the run naming it, `rlvr.train.lost_process`), and what the run has spent
  (`rlvr.train.budget`: completions, optimizer steps, seconds), which stops it when ``budget.*``
  is reached.

A recipe (`rlvr.train.recipes`) only says what one step does.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from tqdm import tqdm

from rlvr import TrainingError, UserError
from rlvr.progress import progress_display
from rlvr.runs import LOCK_FILE, RunDir, RunDirBusy, RunLock
from rlvr.trackers import TrackedRun, TrackerError, Trackers
from rlvr.rollout.verification_tally import VerificationTally
from rlvr.train.accumulation import HarnessAccumulation
from rlvr.train.budget import Spent
from rlvr.train.checkpoint import CheckpointError, HarnessCheckpoints, list_checkpoints, remove_partial_checkpoints
from rlvr.train.common import seed_everything, set_threads
from rlvr.train.config import RunConfig
from rlvr.train.harness_device import ROLL_CALL_DIR, HarnessDevice, fsdp_plugin
from rlvr.train.trainable import Component, HarnessModels

RUN_MARKERS = ("config.yaml", "metrics.jsonl", "checkpoints", "final", "run_state.json")


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    final_model: Path | None
    status: str


class RunAborted(KeyboardInterrupt):
    """A second stop signal (SIGINT, SIGTERM) while the run finishes its step after the first: it stops where it is.
    A KeyboardInterrupt, as Ctrl-C's is, so that no handler of errors on the way out takes it for a failure."""


class Recipe(Protocol):
    """A training procedure run by `Harness.run`. ``step(n)`` trains step ``n`` (1-based) and
    returns its metrics; ``state_dict``/``load_state_dict`` carry what a resume needs beyond the
    registered components (data position, counters)."""

    total_steps: int
    title: str

    def step(self, step: int) -> dict[str, float]: ...

    def evaluate(self) -> dict[str, float]: ...

    def save_final(self) -> Path: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def verification(self) -> VerificationTally | None:
        """Failed verifications so far (None: the recipe verifies nothing)."""

    def failed_streak(self) -> int:
        """Optional: how many steps in a row, up to the last one, had every verification fail (0: none)."""

    def can_checkpoint(self) -> bool:
        """Optional: False when the recipe's state cannot be saved consistently now (e.g. its
        asynchronous generation failed with work in flight): a failure then keeps the last checkpoint."""

    def close(self) -> None: ...


class Harness(HarnessDevice, HarnessModels, HarnessAccumulation, HarnessCheckpoints):
    """The infrastructure of one run configured by ``cfg`` (see the module docstring)."""

    def __init__(self, cfg: RunConfig):
        from accelerate import Accelerator

        self.cfg = cfg
        set_threads(cfg.threads)
        self.chosen_device = self._resolve_device()
        # the schedule steps once per optimizer step: accelerate would step it once per process (it
        # assumes a per-process batch), so with 2 processes a schedule over N steps ended at N/2
        self.accel = Accelerator(cpu=self.chosen_device.type == "cpu", fsdp_plugin=fsdp_plugin() if cfg.distributed == "fsdp" else None,
                                 step_scheduler_with_optimizer=False)
        self.sharded = cfg.distributed == "fsdp" and self.accel.num_processes > 1
        if self.sharded and cfg.model.precision != "fp32":
            raise UserError("model.precision=bf16 has not been run with distributed=fsdp (FSDP applies its own precision policy): "
                            "use distributed=ddp, or model.precision=fp32")
        self._route_fsdp()
        self._check_model_fits()
        seed_everything(cfg.seed + self.accel.process_index)
        self.run_dir = cfg.run_dir
        self.checkpoint_dir = self.run_dir / "checkpoints"
        self.created_run_dir = not self.run_dir.exists()
        self._prepare_run_dir()
        self.provenance = self._provenance()
        self._start_model: dict[str, Any] | None = None  # the starting model's provenance, for the reports of step 0
        self._said_limit = False  # whether an eval.limit beyond the split was said
        self.trackers = self._open_trackers()
        self.rundir = RunDir(self.run_dir, enabled=self.accel.is_main_process)
        if self.is_main:
            for partial in remove_partial_checkpoints(self.checkpoint_dir):
                self.print(f"note: removed the partial checkpoint {partial} (an interrupted write)")
        if cfg.distributed == "fsdp" and self.accel.num_processes == 1:
            self.print("note: distributed=fsdp has no effect in a single process (FSDP is off); launch several processes "
                       "(accelerate launch / torchrun) to shard")
        self.resume_from = self._latest_checkpoint() if cfg.resume else None
        if cfg.resume and self.resume_from is None:
            self.print(f"resume requested but {self.checkpoint_dir} has no checkpoint: starting from scratch")
        self.components: dict[str, Component] = {}
        self.models: list[dict[str, Any]] = []
        self._recorded: list[weakref.ref] = []
        self.start_step = 0
        self.stop_requested = False
        self.saved_step = self.good_step = 0  # the last checkpoint written or resumed; the last step before a failed streak
        self.spent = Spent()  # restored with a checkpoint
        self.notes: dict[str, Any] = {}  # what the run's parts report once (e.g. the decoder chosen), kept in resources.json

    # -- run directory --------------------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        """Hold the run directory for the run's life (`rlvr.runs.RunLock`, main process: a second
        run on the same folder is refused naming the holder) and refuse to write into an existing
        run unless it is resumed or overwritten (every process decides before the main one touches
        anything)."""
        self.run_lock: RunLock | None = None
        busy: RunDirBusy | None = None
        if self.accel.is_main_process:
            try:
                self.run_lock = RunLock.acquire(self.run_dir)
            except RunDirBusy as e:
                busy = e
        if float(self.reduce_sum(torch.tensor([float(busy is not None)]))[0]) > 0:
            raise UserError(str(busy) if busy else f"run directory {self.run_dir} is in use by another run ({RunLock.holder(self.run_dir)})")
        existing = [m for m in RUN_MARKERS if (self.run_dir / m).exists()]
        self.accel.wait_for_everyone()
        refusal = None if existing else not_a_run_folder(self.run_dir, Path(self.cfg.output_dir))
        if refusal:  # overwrite=true deletes a run folder whole: one a run did not make would take the user's files with it
            self.release_run_dir()
            raise UserError(refusal)
        if existing and not self.cfg.resume:
            if not self.cfg.overwrite:
                self.release_run_dir()
                raise UserError(f"run directory {self.run_dir} already holds a run ({', '.join(existing)}): "
                                f"continue it with resume=true (or `rlvr train {self.run_dir} --resume`), "
                                f"start it again with overwrite=true, or choose another name=")
            if self.accel.is_main_process:
                for entry in self.run_dir.iterdir():  # all but the lock this run holds
                    if entry.name != LOCK_FILE:
                        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            self.created_run_dir = True
        self.accel.wait_for_everyone()

    def release_run_dir(self) -> None:
        """Let another run use the run directory (at the end of this one)."""
        if self.run_lock is not None:
            self.run_lock.release()

    def discard_failed_start(self) -> None:
        """After a failure before the first step of a new run: remove the run directory this run
        created (nothing in it can be resumed), so the corrected command runs as typed."""
        self.trackers.finish("failed: before the first step")
        if self.created_run_dir and self.is_main and not list_checkpoints(self.checkpoint_dir):
            shutil.rmtree(self.run_dir, ignore_errors=True)
        self.release_run_dir()

    # -- provenance and trackers -----------------------------------------------------------------

    def _provenance(self) -> dict[str, Any]:
        """Where the run's numbers come from: code commit, library versions, device, processes, host."""
        import platform

        from rlvr.eval.provenance import library_versions, project_commit, utc_now
        from rlvr.models.device import describe_device

        return {"created_utc": utc_now(), "code": project_commit(), "libraries": library_versions(),
                "device": describe_device(self.device), "processes": self.num_processes, "host": platform.node()}

    def _open_trackers(self) -> Trackers:
        """Start ``log.report_to``'s trackers on the main process; if one cannot start, every process
        refuses the run (its one-line `TrackerError`) and a run directory made for it is removed."""
        from rlvr.config import to_dict

        error: TrackerError | None = None
        trackers = Trackers(print=self.print)
        if self.is_main and self.cfg.log.trackers:
            found = list_checkpoints(self.checkpoint_dir) if self.cfg.resume else []
            run = TrackedRun(name=self.cfg.name, project=self.cfg.log.project, run_dir=self.run_dir, config=to_dict(self.cfg),
                             provenance=self.provenance, start_step=found[-1][0] if found else 0)
            try:
                trackers = Trackers.open(self.cfg.log.trackers, run, print=self.print)
            except TrackerError as e:
                error = e
        failed = float(self.reduce_sum(torch.tensor([float(error is not None)]))[0]) > 0
        if failed:
            if self.created_run_dir and self.is_main:
                shutil.rmtree(self.run_dir, ignore_errors=True)  # a tracker may have written into it
            raise error or TrackerError("log.report_to: a tracker could not start on the main process (its message is above)")
        return trackers

    def _latest_checkpoint(self) -> Path | None:
        found = list_checkpoints(self.checkpoint_dir)
        return found[-1][1] if found else None

    # -- processes ------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.accel.device

    @property
    def num_processes(self) -> int:
        return self.accel.num_processes

    @property
    def rank(self) -> int:
        return self.accel.process_index

    @property
    def is_main(self) -> bool:
        return self.accel.is_main_process

    def reduce_sum(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` summed over processes (itself on one process), on the CPU."""
        if self.num_processes == 1:
            return x
        return self.accel.reduce(x.to(self.device), reduction="sum").cpu()

    def gather_counts(self, n: int) -> list[int]:
        """Every process's ``n``, by rank."""
        if self.num_processes == 1:
            return [n]
        return [int(v) for v in self.accel.gather(torch.tensor([n], device=self.device)).cpu()]

    @property
    def current_step(self) -> int:
        """The last step completed (resumed steps included)."""
        return self.start_step + getattr(self, "steps_done", 0)

    def print(self, msg: str) -> None:
        if self.is_main:
            tqdm.write(msg)

    def note(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in the run's ``resources.json``."""
        self.notes[key] = value

    # -- the loop -------------------------------------------------------------------------------

    def run(self, recipe: Recipe) -> TrainResult:
        """Train ``recipe`` from its restored step to ``recipe.total_steps``: log every step,
        evaluate every ``eval.every`` steps, checkpoint every ``log.checkpoint_every`` steps and at
        the end (also after a failure or a signal), save the final model when complete. A new run
        that fails before its first step leaves no run directory behind."""
        self.steps_done = 0
        try:
            return self._run(recipe)
        except BaseException:
            if self.steps_done == 0 and self.resume_from is None:
                self.discard_failed_start()
            raise
        finally:
            self.release_run_dir()

    def _run(self, recipe: Recipe) -> TrainResult:
        cfg = self.cfg
        step = self.start_step = self.saved_step = self.good_step = self.restore(recipe)
        if self.num_processes > 1:  # answers to an earlier attempt's roll call would hide a process lost now
            if self.is_main:
                shutil.rmtree(self.run_dir / ROLL_CALL_DIR, ignore_errors=True)
            self.accel.wait_for_everyone()
        self.rundir.start(step)
        self.rundir.write_config(with_local_paths_resolved(cfg))
        self.rundir.write_json("provenance.json", self.provenance)
        status = "running"
        self.rundir.write_state(status=status, step=step)
        restore_signals = self._install_signal_handlers()
        bar = progress_display(recipe.total_steps, initial=step, desc=recipe.title, unit="step", enabled=cfg.log.progress and self.is_main)
        spent_by = self._budget_reached()
        no_signal = 0  # steps here whose update was skipped for want of a signal: every advantage 0, or every group dropped
        try:
            if cfg.eval.at_start and step == 0:
                self.log(0, recipe.evaluate())
            while step < recipe.total_steps and spent_by is None and not self._stop_agreed():
                t0 = time.perf_counter()
                metrics = recipe.step(step + 1)
                step += 1
                self.steps_done += 1
                metrics["time/step"] = time.perf_counter() - t0
                metrics |= self._charge(metrics)
                no_signal += int(1.0 in (metrics.get("train/skipped_no_signal"), metrics.get("train/skipped_no_group")))
                if not _failed_streak(recipe):
                    self.good_step = step
                spent_by = self._budget_reached()
                if cfg.eval.every and step % cfg.eval.every == 0:
                    metrics |= recipe.evaluate()
                self.log(step, metrics)
                bar.set_postfix({k.split("/")[-1]: f"{metrics[k]:.3f}" for k in ("reward/mean", "reward/accuracy", "sft/loss") if k in metrics})
                bar.update(1)
                if (cfg.log.checkpoint_every and step % cfg.log.checkpoint_every == 0 and step < recipe.total_steps and spent_by is None
                        and self.worth_saving(recipe)):
                    self._checkpoint_and_plot(step, recipe)
            if spent_by is not None:
                self.print(f"{spent_by} reached at step {step} ({self._spent_summary()}): the run is complete")
            status = "completed" if step >= recipe.total_steps or spent_by is not None else "interrupted"
            if status == "completed" or self.worth_saving(recipe):
                self._checkpoint_and_plot(step, recipe)
            final = recipe.save_final() if status == "completed" else None
            tally = recipe.verification()
            if tally is not None and tally.failed:
                self.print(f"{'error' if tally.all_failed else 'warning'}: {tally.summary()}")
                if tally.all_failed:  # no reward reached the policy: this is not a completed run
                    status = "failed: every verification of the run failed; fix the environment (`rlvr envs check ID`)"
            if status == "completed" and no_signal and getattr(self.components.get("policy"), "updates", None) == 0:
                self.print("warning: the run took no optimizer step: every update was skipped for want of a signal (in each group "
                           "every completion got the same reward: train/skipped_no_signal, or every group was dropped: "
                           "train/skipped_no_group), so the final model is the starting one; sample more varied groups "
                           "(rollout.top_k=0 and rollout.top_p=1 leave sampling untruncated; a higher rollout.temperature, a larger "
                           "rollout.group_size) or train on problems the model solves only sometimes")
            return TrainResult(self.run_dir, step, final, status)
        except BaseException as e:
            status, instead = self.fail(e, step, recipe)  # a checkpoint where it can, the error to report
            if instead is not None:
                raise instead from e
            raise
        finally:
            try:  # the signals stay handled until the run's state is written: a hangup repeated meanwhile must not kill it
                bar.close()
                recipe.close()
                try:  # on a full disk these fail too: the error that stopped the run is the one to report
                    self.rundir.write_state(status=status, step=step, spent=self.spent.state_dict(), stopped_by=spent_by)
                    self.rundir.write_json("resources.json", self.resources())
                    if cfg.log.plot:
                        self.rundir.plot(title=recipe.title)
                except OSError as e:
                    self.print(f"could not write the run's summary files: {e}")
                self.trackers.finish(status)
            finally:
                restore_signals()

    # -- what the run spends ---------------------------------------------------------------------

    def _charge(self, metrics: dict[str, float]) -> dict[str, float]:
        """Add one step to `spent` (completions from the step's ``sampling/completions``, summed over
        processes; the policy's optimizer steps; ``time/step``) and return the ``spent/*`` metrics."""
        completions = float(self.reduce_sum(torch.tensor([float(metrics.get("sampling/completions", 0.0))], dtype=torch.float64))[0])
        policy = self.components.get("policy")
        self.spent.charge(completions, int(getattr(policy, "updates", 0)), metrics["time/step"])
        return self.spent.metrics()

    def _budget_reached(self) -> str | None:
        """The ``budget.*`` limit the run has reached, decided the same on every process (seconds
        differ between processes: any process that reached its limit stops them all), or None."""
        budget = self.cfg.budget
        if not budget.active:
            return None
        reached = self.spent.exhausted(budget)
        if self.num_processes > 1:
            anyone = float(self.reduce_sum(torch.tensor([float(reached is not None)]))[0]) > 0
            reached = reached or (f"budget.seconds={budget.seconds:g} (on another process)" if anyone else None)
        return reached

    def _spent_summary(self) -> str:
        s = self.spent
        return f"{s.completions:.0f} completions, {s.optimizer_steps} optimizer steps, {s.seconds:.0f} s"

    def worth_saving(self, recipe: Recipe) -> bool:
        """Whether a checkpoint now holds more than the last one: not during a streak of steps whose
        every verification failed (nothing was learned) once the step before the streak is saved, so
        the rotation (``log.keep_checkpoints``) never removes the state from before an outage.
        Decided the same on every process (the streak is counted over all of them)."""
        return not _failed_streak(recipe) or self.saved_step < self.good_step

    def _checkpoint_and_plot(self, step: int, recipe: Recipe) -> None:
        self.checkpoint(step, recipe)
        self.saved_step = step
        if self.cfg.log.plot and self.is_main:
            self.rundir.plot(title=recipe.title)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.rundir.log_metrics(step, metrics)
        self.trackers.log_metrics(step, metrics)

    def evaluated_model(self) -> str:
        """What an evaluation at the current step evaluates, for its report: the run's policy at this step (the run's
        directory resolved, whatever path a resume was given), at step 0 the model the run starts from."""
        where = f"{Path(self.run_dir).resolve()} at step {self.current_step}"
        return f"{self.cfg.model.name_or_path or 'the built model'} (the start of {where})" if self.current_step == 0 else where

    def log_report(self, name: str, report: dict[str, Any]) -> None:
        """Keep an evaluation report of the current step: ``reports/NAME-step-N.json`` in the run
        directory, and each tracker."""
        step = self.current_step
        if self.is_main:  # (only this process hashes the starting model's weights)
            public = json.loads(json.dumps({k: v for k, v in report.items() if not k.startswith("_")}, default=str))  # plain JSON for every tracker
            public["provenance"] = {**self._report_provenance(step, public.get("created_utc")), **public.get("provenance", {})}
            if public.get("limit_beyond_split") and not self._said_limit:  # the same at every evaluation: said once
                self._said_limit = True
                self.print(f"warning: eval.limit: {public['limit_beyond_split']}")
            path = self.rundir.write_json(str(Path("reports", f"{name}-step-{step}.json")), public)
            self.trackers.log_report(step, name, public, path)

    def _report_provenance(self, step: int, created_utc: str | None) -> dict[str, Any]:
        """An in-run report's provenance (as `rlvr.eval.runner.write_report` gives `rlvr eval`'s): the run's code,
        libraries and device, and the model: at step 0 the starting model (its weight files' sha256 when it is a local
        folder or a built-in), later the run and step (the weights are the checkpoint of that step when one was kept)."""
        from rlvr.eval.provenance import model_provenance

        if step == 0:  # hashed once, for every report of the starting model (one per held-out task)
            if self._start_model is None:
                name = self.cfg.model.name_or_path
                if name == "tiny" and hasattr(self.cfg, "tiny"):  # SFT builds it: what built it (its weights exist nowhere else)
                    from rlvr.config import to_dict

                    self._start_model = {"name": "tiny", "built": to_dict(self.cfg.tiny), "seed": self.cfg.seed}
                else:
                    self._start_model = model_provenance(name) if name else {"name": "the built model"}
            model = self._start_model
        else:
            model = {"run_dir": str(Path(self.run_dir).resolve()), "step": step}
        run = {k: self.provenance[k] for k in ("code", "libraries", "device") if k in self.provenance}
        return {"created_utc": created_utc, "model": model, **run}

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        self.rundir.log_samples(step, rows)

    def _stop_agreed(self) -> bool:
        """Whether any process was asked to stop (a signal to one rank stops them all at the same step
        boundary, so every rank checkpoints and exits together; the others waited for it in a collective)."""
        if self.num_processes == 1:
            return self.stop_requested
        agreed = float(self.reduce_sum(torch.tensor([float(self.stop_requested)]))[0]) > 0
        self.stop_requested = self.stop_requested or agreed  # a signal that arrived during the all-reduce counts at the next boundary
        return agreed

    def _install_signal_handlers(self) -> Callable[[], None]:
        """SIGINT/SIGTERM finish the current step, checkpoint and stop (a second signal aborts). So does SIGHUP, the
        terminal's hangup (an ssh connection that drops), unless the run ignores it (``nohup``): its output, where it
        went to that terminal, goes nowhere from then on (writing there would fail and end the run), and a repeated
        hangup (the kernel's and the shell's) is not a second signal."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        handled = [signal.SIGINT, signal.SIGTERM]
        if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
            handled.append(signal.SIGHUP)
        previous = {s: signal.getsignal(s) for s in handled}
        self._signalled = False
        terminal = _terminal_fds()  # known now: once the terminal hangs up, it no longer says it is one (isatty fails too)

        def handler(signum, frame):
            hangup = signum == getattr(signal, "SIGHUP", None)
            if hangup:
                _leave(terminal)
                if self.stop_requested:
                    return
            elif self._signalled:  # this process's second signal (a stop agreed with the others is not one)
                raise RunAborted(f"a second {signal.Signals(signum).name} (the first had asked it to stop after its step)")
            self._signalled = self.stop_requested = True
            every = f" (process {self.rank} of {self.num_processes}: every process stops with it)" if self.num_processes > 1 else ""
            fresh_line = "\n" if sys.stdout.isatty() else ""  # after the terminal's ^C and a bar's partial line; a log has neither
            why, again = (" (the terminal hung up)", "") if hangup else ("", " (again to abort)")  # a repeated hangup aborts nothing
            tqdm.write(f"{fresh_line}{signal.Signals(signum).name}{why}: stopping after this step and saving a checkpoint{every}{again}")

        for s in previous:
            signal.signal(s, handler)
        return lambda: [signal.signal(s, h) for s, h in previous.items()]


def _terminal_fds() -> list[int]:
    """The standard streams' file descriptors that are a terminal."""
    fds = []
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if os.isatty(stream.fileno()):
                fds.append(stream.fileno())
        except (AttributeError, OSError, ValueError):
            pass  # no file descriptor (replaced in-process), or closed
    return fds


def _leave(terminal: list[int]) -> None:
    """Point the file descriptors ``terminal`` at /dev/null: after a hangup a write there fails (EIO) wherever it happens,
    which would end the run before its checkpoint; a stream redirected to a file keeps it."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
    except OSError:
        return
    for fd in terminal:
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def _failed_streak(recipe: Recipe) -> int:
    return getattr(recipe, "failed_streak", lambda: 0)() or 0



def not_a_run_folder(run_dir: Path, output_dir: Path) -> str | None:
    """Why a new run must not start in ``run_dir`` (which holds no run), or None: it holds files already (they would
    be deleted with the run by a later overwrite=true), or it lies inside another run's folder (ditto)."""
    if run_dir.is_dir():
        others = sorted(e.name for e in run_dir.iterdir() if e.name != LOCK_FILE)
        if others:
            return (f"run directory {run_dir} exists and holds files that are not a run ({', '.join(others[:3])}"
                    f"{', ...' if len(others) > 3 else ''}): a run starts in a new or empty folder, as overwrite=true deletes "
                    f"its folder whole; choose another name= or move them")
    for parent in run_dir.parents:
        if parent == output_dir or parent == parent.parent:
            break
        if any((parent / m).exists() for m in RUN_MARKERS):
            return (f"run directory {run_dir} is inside the run {parent}, which overwrite=true would delete with it; "
                    f"choose a name= outside it")
    return None


LOCAL_PATH_KEYS = ("model.name_or_path", "algo.critic.init", "algo.prm.init", "pairs.path")
"""Settings that may name a local file or folder relative to where the run started."""


def with_local_paths_resolved(cfg: Any) -> dict[str, Any]:
    """``cfg`` as the run's ``config.yaml`` holds it: ``resume`` and ``overwrite`` false (`rlvr train RUN --resume` continues
    a run; its config file given to `rlvr train` starts one, and deletes no run, whatever started this one), and its relative paths to local files and folders (the model, the
    critic's and PRM's starting points, the pairs file) made absolute: `rlvr train RUN --resume` from another folder reads
    the run's config and would look for them there (a hub id is no local path and is kept as given)."""
    from rlvr.config import to_dict

    out = to_dict(cfg)
    for action in ("resume", "overwrite"):  # actions, not settings: the file (or a copy) given to `rlvr train` starts a run and
        if action in out:                   # deletes nothing, whatever the command that started or resumed this one asked
            out[action] = False
    for key in LOCAL_PATH_KEYS:
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        value = node.get(leaf) if isinstance(node, dict) else None
        if isinstance(value, str) and value and not Path(value).is_absolute() and Path(value).exists():
            node[leaf] = os.path.abspath(value)  # (not resolve(): a link the user named stays the link)
    return out


__all__ = ["CheckpointError", "Harness", "Recipe", "TrainResult", "TrainingError"]
