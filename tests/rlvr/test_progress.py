"""Progress off a terminal is one plain line per interval, not bar redraws (`rlvr.progress`)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr import UserError
from rlvr.progress import INTERVAL_ENV, LineProgress, line_interval, progress_display

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A clock the test moves by hand, so the lines written do not depend on the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_interval_and_a_last_line_with_the_final_count():
    out, clock = io.StringIO(), Clock()
    bar = LineProgress(100, desc="train", unit="step", stream=out, interval=30, clock=clock)
    for step in range(100):
        clock.now += 1.0
        bar.set_postfix({"accuracy": f"{step / 100:.3f}"})
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["train: 30/100 steps (30%)", "train: 60/100 steps (60%)",
                                                      "train: 90/100 steps (90%)", "train: 100/100 steps (100%)"]
    assert lines[-1].endswith("accuracy=0.990") and " 100 s" in lines[-1]
    assert "\r" not in out.getvalue()


def test_a_loop_cut_short_still_ends_with_its_count_and_a_disabled_one_writes_nothing():
    out, clock = io.StringIO(), Clock()
    with LineProgress(50, desc="eval", unit="prob", stream=out, interval=30, clock=clock, initial=10) as bar:
        clock.now = 5.0
        bar.update(7)
    assert out.getvalue().splitlines() == ["eval: 17/50 probs (34%), 5 s, 1.4 probs per second"]
    silent = io.StringIO()
    with LineProgress(50, desc="eval", unit="prob", stream=silent, interval=0, enabled=False) as bar:
        bar.update(50)
    assert silent.getvalue() == ""


def test_a_file_gets_lines_and_a_bad_interval_is_named(monkeypatch):
    assert isinstance(progress_display(3, desc="x", unit="step", stream=io.StringIO()), LineProgress)  # not a terminal
    monkeypatch.setenv(INTERVAL_ENV, "soon")
    with pytest.raises(UserError, match=INTERVAL_ENV):
        line_interval()
    monkeypatch.setenv(INTERVAL_ENV, "0")
    assert line_interval() == 0


def test_rlvr_eval_into_a_log_writes_lines_not_redraws(tmp_path):
    """The real CLI with stderr a pipe (as in ``rlvr ... 2> log``): its own progress comes as lines, and
    the Hugging Face bars (loading weights) are off."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), INTERVAL_ENV: "0"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    from rlvr.models.tiny import TinyModelConfig, build_tiny_model

    build_tiny_model(TinyModelConfig(hidden_size=32, layers=1, heads=2, intermediate_size=64), str(tmp_path / "model"))
    proc = subprocess.run([sys.executable, "-m", "rlvr.cli", "eval", "--model", str(tmp_path / "model"), "--task", "arithmetic-v1",
                           "--limit", "6", "--max-new-tokens", "4", "--verify-workers", "0", "--out", str(tmp_path / "report")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "it/s]" not in proc.stderr, proc.stderr  # no bar, ours or a library's
    lines = [line for line in proc.stderr.splitlines() if line.startswith("eval greedy:")]
    assert lines == [lines[0]] and lines[0].startswith("eval greedy: 6/6 probs (100%)"), proc.stderr
