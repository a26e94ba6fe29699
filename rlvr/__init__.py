"""rlvr: trainers, algorithms, rollout engines, evaluation, config and CLI."""

__version__ = "0.1.0"


class UserError(Exception):
    """Bad input from the user (config, arguments, files): the CLI prints the message, no traceback.

    Registry and task errors are user errors too; the CLI treats them alike.
    """


class TrainingError(RuntimeError):
    """Training cannot continue; the run directory holds everything written so far (raised by the
    training harness, `rlvr.train.harness`, and by the rollout side of a run, e.g. when every
    verification keeps failing)."""
