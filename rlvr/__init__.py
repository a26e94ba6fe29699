"""rlvr: trainers, algorithms, rollout engines, evaluation, config and CLI.

From Python: ``rlvr.train(config, ...)``, ``rlvr.evaluate(model, task, ...)``, ``rlvr.compare(reports)``
(`rlvr.api`; docs: Python API)."""

from typing import Any

__version__ = "0.1.0"


class UserError(Exception):
    """Bad input from the user (config, arguments, files): the CLI prints the message, no traceback.

    Registry and task errors are user errors too; the CLI treats them alike.
    """


class TrainingError(RuntimeError):
    """Training cannot continue; the run directory holds everything written so far (raised by the
    training harness, `rlvr.train.harness`, and by the rollout side of a run, e.g. when every
    verification keeps failing)."""


def evaluate(model: Any, task: Any, **options: Any) -> Any:
    """Evaluate a model on a task's split, as ``rlvr eval`` (`rlvr.api.evaluate`)."""
    from rlvr.api import evaluate as run

    return run(model, task, **options)


def compare(reports: Any, labels: Any = None) -> Any:
    """Greedy accuracies and paired differences of evaluations, as ``rlvr compare`` (`rlvr.api.compare`)."""
    from rlvr.api import compare as run

    return run(reports, labels)


def __getattr__(name: str) -> Any:
    # ``rlvr.train`` is the training package; importing it makes it callable as ``rlvr.train(config, ...)``
    if name == "train":
        import importlib

        return importlib.import_module("rlvr.train")
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
