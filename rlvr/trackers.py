"""Experiment trackers (``log.report_to``): where a training run's metrics go besides
``metrics.jsonl``.

Each tracker is one small class registered by name in `TRACKERS`; it receives the resolved config
and the run's provenance when the run starts, every logged metric, every evaluation report, and the
run's final status. A tracker reads its own settings from its package's environment variables
(``WANDB_MODE``, ``MLFLOW_TRACKING_URI``, ``TRACKIO_DIR``, ...): rlvr passes only the project, the
run's name and what it logs.

Failures: a tracker that cannot start (package not installed, no login, bad settings) refuses the
run with one line naming it and what to do, before any model loads (a scripted run that asked for a
tracker should not train for hours without it); one that fails later is contained by `Trackers`:
the call is counted, the first failure printed, and the run goes on.

Every call to a tracker has a deadline (`START_TIMEOUT_S` to start, `CALL_TIMEOUT_S` after): a
tracker whose server does not answer refuses the run at start in one line naming the tracker and
where it was sent, and mid-run a call that does not return in time is counted as a failure (the
run does not wait for it; that tracker's calls are skipped, and counted, until it returns).

Importing this module imports no tracker's package; each is imported when its run starts.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from rlvr import UserError


class TrackerError(UserError):
    """A tracker named in ``log.report_to`` cannot be used: one line saying which and what to do."""


START_TIMEOUT_S = 45.0  # a tracker that has not started by then is refused: its server does not answer
CALL_TIMEOUT_S = 30.0  # the most a logging call may hold up the run


@dataclass
class TrackedRun:
    """What every tracker is told when a run starts."""

    name: str  # the run's name (``name``)
    project: str  # ``log.project``
    run_dir: Path
    config: dict[str, Any]  # the resolved config, as plain data
    provenance: dict[str, Any]  # code commit, library versions, device, host
    start_step: int = 0  # a resumed run logs the steps after this one


class Tracker:
    """One experiment tracker. Subclasses set `name`, `install` (what to ``pip install``) and `hint`
    (what to check when it cannot start), and implement the four calls."""

    name: ClassVar[str]
    install: ClassVar[str]
    hint: ClassVar[str] = ""

    def start(self, run: TrackedRun) -> None:
        raise NotImplementedError

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        raise NotImplementedError

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        """``report`` (JSON data) was written to ``path`` inside the run directory."""
        raise NotImplementedError

    def finish(self, status: str) -> None:
        """``status``: "completed", "interrupted" (stopped after a step), "aborted: ..." (stopped within one: a second
        signal) or "failed: ..." (`rlvr.train.harness.TrainResult`)."""
        raise NotImplementedError

    def where(self) -> str:
        """Where this tracker sends the run (a URI or a folder), for messages; "" if nowhere in particular."""
        return ""


TRACKERS: dict[str, type[Tracker]] = {}
"""Every tracker ``log.report_to`` may name, by name."""


def register(cls: type[Tracker]) -> type[Tracker]:
    """Class decorator: make ``cls`` available to ``log.report_to`` as ``cls.name``."""
    TRACKERS[cls.name] = cls
    return cls


def check_names(names: list[str]) -> None:
    """Refuse an unknown or repeated name in ``log.report_to``."""
    for i, name in enumerate(names):
        if name not in TRACKERS:
            close = difflib.get_close_matches(name, list(TRACKERS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TrackerError(f"log.report_to: unknown tracker {name!r} ({hint}known: {', '.join(TRACKERS)})")
        if name in names[:i]:
            raise TrackerError(f"log.report_to: {name!r} is listed twice")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys (``{"log": {"project": "x"}}`` -> ``{"log.project": "x"}``)."""
    if not isinstance(data, dict):
        return {prefix.rstrip("."): data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out |= flatten(value, f"{prefix}{key}.") if isinstance(value, dict) and value else {f"{prefix}{key}": value}
    return out


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    """The finite numbers among ``metrics`` (a NaN or None is left out, as in TensorBoard)."""
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _first_line(error: BaseException, limit: int = 240) -> str:
    text = (str(error).strip().splitlines() or [type(error).__name__])[0]
    text = text.split(". ")[0]  # the first sentence: some packages explain for a paragraph
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the trackers -------------------------------------------------------------------------------


@register
class TensorBoardTracker(Tracker):
    """Event files in the run's ``tb/`` folder (``tensorboard --logdir runs``)."""

    name = "tensorboard"
    install = "tensorboard"

    def start(self, run: TrackedRun) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run purges the events past its checkpoint (otherwise its curves run backwards)
        self.writer = SummaryWriter(str(run.run_dir / "tb"), purge_step=run.start_step + 1 if run.start_step else None)
        self.writer.add_text("config", _code_block(run.config), run.start_step)
        self.writer.add_text("provenance", _code_block(run.provenance), run.start_step)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        self.writer.add_text(f"{name}/report", _code_block(report), step)
        self.writer.flush()

    def finish(self, status: str) -> None:
        self.writer.close()


@register
class WandbTracker(Tracker):
    """A Weights & Biases run (``WANDB_MODE=offline`` keeps it on disk for ``wandb sync``); its
    files go to the run directory unless ``WANDB_DIR`` says where."""

    name = "wandb"
    install = "wandb"
    hint = "log in with `wandb login` (or set WANDB_API_KEY), or set WANDB_MODE=offline"

    def start(self, run: TrackedRun) -> None:
        import wandb

        where = {} if os.environ.get("WANDB_DIR") else {"dir": str(run.run_dir)}
        self.run_dir = run.run_dir
        self.run = wandb.init(project=run.project, name=run.name, config={**run.config, "provenance": run.provenance}, **where)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        self.run.save(str(path), base_path=str(self.run_dir), policy="now")
        self.run.summary[f"{name}/report"] = report  # the latest, shown on the run's overview

    def finish(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "completed" else 1)

    def where(self) -> str:
        return "offline" if os.environ.get("WANDB_MODE") in ("offline", "disabled") else os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")


@register
class MlflowTracker(Tracker):
    """An MLflow run in experiment ``log.project`` of the store ``MLFLOW_TRACKING_URI`` names
    (mlflow's default otherwise): the config as parameters (dotted keys) and as ``config.json``,
    the provenance as ``provenance.json`` and ``rlvr.*`` tags, reports under ``reports/``."""

    name = "mlflow"
    install = "mlflow-skinny"
    hint = ("set MLFLOW_TRACKING_URI to a server (http://...), to sqlite:///mlflow.db (needs the full `mlflow` package) "
            "or to file:./mlruns with MLFLOW_ALLOW_FILE_STORE=true")

    PARAMS_PER_CALL, METRICS_PER_CALL = 100, 1000  # mlflow's limits on one log_batch call
    PARAM_VALUE_CHARS = 6000

    # mlflow retries an unanswered request for minutes by default: a few seconds unless the user says otherwise
    HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2"}

    def start(self, run: TrackedRun) -> None:
        for key, value in self.HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        experiment = self.client.get_experiment_by_name(run.project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(run.project)
        code, libraries = run.provenance.get("code", {}), run.provenance.get("libraries", {})
        tags = {"rlvr.run_dir": str(run.run_dir), "rlvr.commit": str(code.get("commit")), "rlvr.version": str(libraries.get("rlvr"))}
        self.run_id = self.client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id
        params = [Param(k, json.dumps(v) if not isinstance(v, str) else v) for k, v in flatten(run.config).items()]
        params = [Param(p.key, p.value[: self.PARAM_VALUE_CHARS]) for p in params]
        for i in range(0, len(params), self.PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i:i + self.PARAMS_PER_CALL])
        self.client.log_dict(self.run_id, run.config, "config.json")
        self.client.log_dict(self.run_id, run.provenance, "provenance.json")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for k, v in metrics.items()]
        for i in range(0, len(rows), self.METRICS_PER_CALL):
            self.client.log_batch(self.run_id, metrics=rows[i:i + self.METRICS_PER_CALL])

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path="reports")

    def finish(self, status: str) -> None:
        state = "FINISHED" if status == "completed" else "KILLED" if status.startswith(("interrupted", "aborted")) else "FAILED"
        self.client.set_terminated(self.run_id, status=state)

    def where(self) -> str:
        return os.environ.get("MLFLOW_TRACKING_URI") or "mlflow's default tracking URI"


@register
class TrackioTracker(Tracker):
    """A Trackio run in project ``log.project``, stored locally under ``TRACKIO_DIR`` (or on a
    Hugging Face Space when ``TRACKIO_SPACE_ID`` names one)."""

    name = "trackio"
    install = "trackio"
    hint = "check TRACKIO_DIR (a writable folder) and TRACKIO_SPACE_ID"

    def start(self, run: TrackedRun) -> None:
        import trackio
        from trackio import utils

        if not os.environ.get("TRACKIO_SPACE_ID"):
            _check_writable(Path(utils.TRACKIO_DIR), "TRACKIO_DIR")  # trackio would lose every metric and say nothing
        self.trackio = trackio
        self.run = trackio.init(project=run.project, name=run.name, config={**run.config, "provenance": run.provenance}, embed=False)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        self.run.log({f"{name}/report": self.trackio.Markdown(_code_block(report))}, step=step)

    def finish(self, status: str) -> None:
        self.run.finish()

    def where(self) -> str:
        return os.environ.get("TRACKIO_SPACE_ID") or os.environ.get("TRACKIO_DIR") or "trackio's default folder"


def _check_writable(folder: Path, setting: str) -> None:
    """Raise `OSError` (one line) unless a file can be created in ``folder`` (made if missing)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rlvr-write-check-"):
            pass
    except OSError as e:
        raise OSError(f"{setting} {folder} is not a writable folder ({e.strerror or type(e).__name__})") from None


def _code_block(data: Any) -> str:
    return "```json\n" + json.dumps(data, indent=2, default=str) + "\n```"


# -- the set a run reports to ---------------------------------------------------------------------


@dataclass
class Trackers:
    """The started trackers of one run. Every call reaches each of them; one that raises is counted
    and printed once, and the others (and the run) go on."""

    trackers: list[Tracker] = field(default_factory=list)
    print: Callable[[str], None] = print
    failures: dict[str, int] = field(default_factory=dict)
    call_timeout_s: float = CALL_TIMEOUT_S
    _busy: dict[str, threading.Thread] = field(default_factory=dict)  # a call that has not returned, by tracker

    @classmethod
    def open(cls, names: list[str], run: TrackedRun, print: Callable[[str], None] = print,
             start_timeout_s: float = START_TIMEOUT_S, call_timeout_s: float = CALL_TIMEOUT_S) -> Trackers:
        """Start the trackers ``names`` for ``run``; the first that cannot start (or has not started
        within ``start_timeout_s``) raises `TrackerError` (one line) after the ones already started
        are finished."""
        check_names(names)
        started = cls(print=print, call_timeout_s=call_timeout_s)
        for name in names:
            tracker = TRACKERS[name]()
            thread, error = _bounded(lambda t=tracker: t.start(run), start_timeout_s)
            if thread.is_alive() or error is not None:
                started.finish("failed: another tracker could not start")
                if error is None:
                    where = tracker.where()
                    raise TrackerError(f"log.report_to: {name} did not start within {start_timeout_s:g} s"
                                       f"{f' (at {where})' if where else ''}: check that it is reachable, or leave {name} out of log.report_to")
                raise TrackerError(_start_failure(tracker, error)) from error
            started.trackers.append(tracker)
        return started

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.trackers]

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        numbers = _numbers(metrics)
        self._each("log_metrics", lambda t: t.log_metrics(step, numbers))

    def log_report(self, step: int, name: str, report: dict[str, Any], path: Path) -> None:
        self._each("log_report", lambda t: t.log_report(step, name, report, path))

    def finish(self, status: str) -> None:
        self._each("finish", lambda t: t.finish(status))
        for name, count in self.failures.items():
            self.print(f"warning: tracker {name}: {count} call(s) failed during the run (the run's own files hold everything)")
        self.trackers = []

    def _each(self, what: str, call: Callable[[Tracker], None]) -> None:
        for tracker in self.trackers:
            busy = self._busy.get(tracker.name)
            if busy is not None and busy.is_alive():
                self._failed(tracker, what, f"skipped: an earlier call has not returned in {self.call_timeout_s:g} s")
                continue
            thread, error = _bounded(lambda t=tracker: call(t), self.call_timeout_s)
            if thread.is_alive():
                self._busy[tracker.name] = thread
                self._failed(tracker, what, f"no answer within {self.call_timeout_s:g} s")
            elif error is not None:
                self._failed(tracker, what, f"{type(error).__name__}: {_first_line(error)}")

    def _failed(self, tracker: Tracker, what: str, why: str) -> None:
        self.failures[tracker.name] = self.failures.get(tracker.name, 0) + 1
        if self.failures[tracker.name] == 1:
            self.print(f"warning: tracker {tracker.name} failed in {what}: {why} (the run goes on; further failures are counted)")


def _bounded(call: Callable[[], None], timeout_s: float) -> tuple[threading.Thread, BaseException | None]:
    """Run ``call`` in a daemon thread for at most ``timeout_s``: the thread (alive if it has not
    returned: it is left behind) and what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which decides
            raised.append(e)

    thread = threading.Thread(target=run, name="rlvr-tracker-call", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return thread, (raised[0] if raised and not thread.is_alive() else None)


def _start_failure(tracker: Tracker, error: Exception) -> str:
    """The one line that explains why ``tracker`` could not start."""
    leave_out = f"or leave {tracker.name} out of log.report_to"
    if isinstance(error, ModuleNotFoundError) and _missing_package(error, tracker):
        return (f"log.report_to: {tracker.name} is not installed: pip install {tracker.install} "
                f"(or pip install 'rlvr[trackers]'), {leave_out}")
    hint = f"{tracker.hint}, " if tracker.hint else ""
    return f"log.report_to: {tracker.name} could not start ({type(error).__name__}: {_first_line(error)}): {hint}{leave_out}"


def _missing_package(error: ModuleNotFoundError, tracker: Tracker) -> bool:
    """The tracker's own package is missing (not one of its dependencies, which the message names)."""
    missing = (error.name or "").partition(".")[0]
    return missing in {tracker.name, tracker.install.removesuffix("-skinny")}


__all__ = ["TRACKERS", "TrackedRun", "Tracker", "TrackerError", "Trackers", "check_names", "register"]
