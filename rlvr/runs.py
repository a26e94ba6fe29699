"""The run directory ``runs/NAME/``: resolved config, metrics, TensorBoard events, sampled
completions with their verdicts, evaluation reports, checkpoints and plots. Every write is flushed
at once, so a killed run keeps everything it logged. Experiment trackers (TensorBoard's ``tb/``
among them) are `rlvr.trackers`."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rlvr.config import dump_yaml
from rlvr.plots import plot_metrics

LOCK_FILE = ".run.lock"
"""The file a run holds locked (`RunLock`) for its life; it also names the holder."""


class RunDirBusy(RuntimeError):
    """Another live process holds the run directory (its message names the holder's pid)."""


class RunLock:
    """An exclusive hold on one run directory for the life of a run, so a second process (a job
    resubmitted while the first still runs) cannot write checkpoints and metrics into it too.

    ``flock`` on ``.run.lock``: the kernel releases it when the holder's file is closed or its
    process dies, so a killed run never leaves a stale lock that blocks ``--resume``."""

    def __init__(self, path: Path, file: Any):
        self.path = path
        self._file = file

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        """Hold ``run_dir`` (created if missing), or raise `RunDirBusy` naming the holder."""
        import fcntl
        import os
        import socket

        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / LOCK_FILE
        file = open(path, "a+")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read(200).strip() or "unknown"
            file.close()
            raise RunDirBusy(f"run directory {run_dir} is in use by another run ({holder}): wait for it to end or stop it, "
                             f"or choose another name=") from None
        file.seek(0)
        file.truncate()
        file.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        file.flush()
        return cls(path, file)

    @staticmethod
    def holder(run_dir: str | Path) -> str:
        """Who holds ``run_dir`` as its lock file says (the pid and host), or ``"unknown"``."""
        try:
            return (Path(run_dir) / LOCK_FILE).read_text()[:200].strip() or "unknown"
        except OSError:
            return "unknown"

    def release(self) -> None:
        """Let another run have the directory (idempotent)."""
        if not self._file.closed:
            self._file.close()  # closing the file drops the flock


class RunDir:
    """Writer for one run's directory (only the main process writes).

    Layout: ``config.yaml``, ``provenance.json``, ``metrics.jsonl``, ``samples.jsonl``,
    ``reports/`` (evaluation reports), ``tb/`` (TensorBoard), ``checkpoints/step-N/``, ``final/``
    (the trained model), ``curves.png``, ``run_state.json``, ``.run.lock`` (`RunLock`).
    """

    def __init__(self, path: str | Path, *, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        if enabled:
            self.path.mkdir(parents=True, exist_ok=True)

    def start(self, step: int = 0) -> None:
        """Begin logging after ``step``: rows a resumed run will log again are dropped."""
        if self.enabled and step:
            self.truncate_after(step)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def write_config(self, cfg: Any) -> None:
        if self.enabled:
            dump_yaml(cfg, self.path / "config.yaml")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if self.enabled and rows:
            with (self.path / "samples.jsonl").open("a") as f:
                for row in rows:
                    f.write(json.dumps({"step": step, **row}, ensure_ascii=False) + "\n")

    def truncate_after(self, step: int) -> None:
        """Drop logged rows past ``step`` (a resumed run repeats them)."""
        for name in ("metrics.jsonl", "samples.jsonl"):
            p = self.path / name
            if self.enabled and p.exists():
                keep = [line for line in p.read_text().splitlines() if _row_step(line) <= step]
                p.write_text("".join(line + "\n" for line in keep))

    def write_state(self, **state: Any) -> None:
        if self.enabled:
            (self.path / "run_state.json").write_text(json.dumps(state, indent=2, default=str))

    def write_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        if self.enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2, default=str))
        return path

    def plot(self, title: str = "") -> Path | None:
        if not self.enabled:
            return None
        return plot_metrics(self.metrics_path, self.path / "curves.png", title=title)


def _row_step(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except json.JSONDecodeError:
        return math.inf  # a torn last line of a killed run: drop it
