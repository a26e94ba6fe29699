"""What a run checks about its task before any model loads: the splits it names exist and are
used as intended, and the training split shares no question with the held-out data
(`tasks.leakage`), so a bad task fails in seconds, naming the config key, not after the model loads."""

from __future__ import annotations

from typing import Callable

from rlvr import UserError
from rlvr.train.config import RunConfig
from tasks.base import Task, TaskError
from tasks.leakage import check_leakage

# an unbounded training stream is checked over the prefix the run can draw, at most this many items
MAX_STREAM_CHECK = 20_000

REPEATS_WARNING = 10
"""A run that may draw each problem of its finite training split more than this many times is warned:
its reward curve then measures memorising a few problems rather than learning the task."""

_NO_VALIDATION_ADVICE = ("evaluation during training selects the model, so it reads a validation split, never test: carve one from train "
                         "(tasks.from_dataset and file: ids do by default, validation_fraction; a DatasetTask sets validation_from_train), "
                         "or set eval.every=0 and eval.at_start=false and evaluate on test once, after training, with rlvr eval")


def open_training_task(cfg: RunConfig, *, evaluates: bool, prompts_needed: int, say: Callable[[str], None]) -> Task:
    """The configured task after the checks above.

    ``evaluates``: the run will evaluate on ``eval.split``; ``prompts_needed``: how many items of
    an unbounded training split the run can draw (its leakage check covers that prefix);
    ``say``: prints a warning on the main process.
    """
    task = cfg.task.make()  # refuses a training split the task lacks
    check_splits(task, cfg, evaluates)
    if evaluates and cfg.eval.split == "test":
        say("warning: eval.split=test: choosing a checkpoint or a setting by these numbers selects the model on the test split, "
            "and its test score then overstates; evaluate on a validation split while training")
    _warn_if_repeated(task, cfg.task.split, prompts_needed, say)
    if cfg.task.leakage != "off":
        _check_leakage(task, cfg, prompts_needed, say)
    return task


def check_splits(task: Task, cfg: RunConfig, evaluates: bool) -> None:
    """``task.split`` is a training split of ``task`` and, when the run ``evaluates``, ``eval.split`` exists."""
    if cfg.task.split not in task.splits:
        raise TaskError(f"task.split={cfg.task.split!r}: task {task.id} has no such split (its splits: {', '.join(task.splits)})")
    if cfg.task.split in task.heldout_splits:
        raise UserError(f"task.split={cfg.task.split!r} is a held-out split of {task.id}: train on a training split "
                        f"(its held-out splits: {', '.join(task.heldout_splits)})")
    if evaluates and cfg.eval.split not in task.splits:
        raise UserError(f"eval.split={cfg.eval.split!r}: task {task.id} has no such split (its splits: {', '.join(task.splits)}); {_NO_VALIDATION_ADVICE}")


def _warn_if_repeated(task: Task, split: str, prompts_needed: int, say: Callable[[str], None]) -> None:
    try:
        size = task.size(split)
    except TaskError:  # data not here: the run's own loading says so, in its place
        return
    if size and prompts_needed > REPEATS_WARNING * size:
        say(f"warning: task {task.id}: the run may draw {prompts_needed} prompts from the {size} problems of {split!r}, each about "
            f"{prompts_needed / size:.0f} times; more data (or fewer update.steps) keeps the reward from measuring memorisation")


def prompts_drawn(cfg, sampling_budget: float, processes: int) -> int:
    """The most training prompts an online run (a `TrainConfig`) can draw: every step's prompts on
    every process, times the dynamic-sampling budget."""
    return int(cfg.update.steps * cfg.rollout.prompts_per_step * processes * max(sampling_budget, 1.0))


def _check_leakage(task: Task, cfg: RunConfig, prompts_needed: int, say: Callable[[str], None]) -> None:
    try:
        report = check_leakage(task, cfg.task.split, train_limit=min(max(prompts_needed, 1), MAX_STREAM_CHECK))
    except TaskError as e:  # e.g. held-out data that is not on this machine: nothing to compare with
        say(f"note: leakage check skipped: {e}")
        return
    if report.clean:
        return
    message = (f"task {task.id}: the training split {cfg.task.split!r} shares questions with held-out data ({report.summary()}); "
               "held-out scores of this run would overstate what it learned")
    if cfg.task.leakage == "refuse":
        raise UserError(message + "; fix the task's splits (`rlvr tasks leakage ID` lists them)")
    say(f"warning: {message}. Fix the task's splits, or set task.leakage=refuse to stop such runs")
