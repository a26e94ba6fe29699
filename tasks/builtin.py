"""Registers the tasks that ship with rlvr (named by the ``rlvr.tasks`` entry point)."""

import tasks


def register_all() -> None:
    tasks.register(
        "arithmetic-v1", "tasks.arithmetic:ArithmeticTask",
        description="Procedural multi-digit +, -, * with a worked scratchpad (embedded quickstart task)",
    )
