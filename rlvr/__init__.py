"""rlvr: trainers, algorithms, rollout engines, evaluation, config and CLI."""

__version__ = "0.1.0"


class UserError(Exception):
    """Bad input from the user (config, arguments, files): the CLI prints the message, no traceback.

    Registry and task errors are user errors too; the CLI treats them alike.
    """
